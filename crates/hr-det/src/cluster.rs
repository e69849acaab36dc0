//! What a cluster offers a user: its workspaces, projects and resource pools.

use reqwest::Method;

use crate::{
    Client, DetError,
    client::Body,
    wire::{
        Project, ProjectResponse, ResourcePool, ResourcePoolsResponse, Workspace,
        WorkspacesResponse,
    },
};

const NO_BODY: Body<'static, ()> = Body::None;

impl Client {
    /// `GET /api/v1/workspaces?name=NAME`: the workspaces of that name (one, or none).
    pub async fn workspaces_named(&self, name: &str) -> Result<Vec<Workspace>, DetError> {
        let query: String = reqwest::Url::parse_with_params("http://x/", [("name", name)])
            .map_err(|e| DetError::Config(e.to_string()))?
            .query()
            .unwrap_or_default()
            .to_owned();
        let resp: WorkspacesResponse = self
            .call(
                Method::GET,
                &format!("api/v1/workspaces?{query}"),
                NO_BODY,
                true,
                None,
            )
            .await?;
        // A master that ignores the filter lists them all.
        Ok(resp
            .workspaces
            .into_iter()
            .filter(|w| w.name == name)
            .collect())
    }

    /// `GET /api/v1/projects/{id}`.
    pub async fn project(&self, id: i32) -> Result<Project, DetError> {
        let resp: ProjectResponse = self
            .call(
                Method::GET,
                &format!("api/v1/projects/{id}"),
                NO_BODY,
                true,
                None,
            )
            .await?;
        Ok(resp.project)
    }

    /// `GET /api/v1/resource-pools`.
    pub async fn resource_pools(&self) -> Result<Vec<ResourcePool>, DetError> {
        let resp: ResourcePoolsResponse = self
            .call(Method::GET, "api/v1/resource-pools", NO_BODY, true, None)
            .await?;
        Ok(resp.resource_pools)
    }
}
