//! Password hashing as the Python client does it before `POST /api/v1/auth/login`.

use sha2::{Digest, Sha512};

const SALT: &str = "GubPEmmotfiK9TMD6Zdw";

/// The hashed password the client sends with `isHashed: true`: sha512 hex of the salt followed by
/// the password, or the empty string for an empty password.
pub fn hash_password(password: &str) -> String {
    if password.is_empty() {
        return String::new();
    }
    hex::encode(Sha512::digest(format!("{SALT}{password}").as_bytes()))
}
