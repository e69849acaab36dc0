//! Where the libraries' logs go: one `tracing` subscriber writing to stderr. Without `RUST_LOG`,
//! `info` and above, as the bare lines the commands have always printed (warnings and errors
//! keep their level); with `RUST_LOG` (`debug`, `hr_det=debug,hr_train=info`, ...), what it
//! selects, each line with time, level and target. The training loop's step events
//! (`hr_train::PROGRESS_TARGET`) become a progress bar when stderr is a terminal, drawn from the
//! start of training (`hr_train::PROGRESS_BEGIN_TARGET`) with an ETA from the average step so
//! far; piped or logged output keeps them as one plain line per step. A layer counts the GPU backends'
//! kernel launches (`kernel_launches`, for `generate`'s summary and `bench decode`).

use std::{
    io::{IsTerminal, Write},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressStyle};
use tracing::{Level, Subscriber, field::Visit};
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{LevelFilter, filter_fn},
    fmt::MakeWriter,
    layer::{Context, SubscriberExt},
    util::SubscriberInitExt,
};

/// Kernel launches the GPU backends have made in this process: cubecl's `launch_inner` spans
/// (one per launch, fused or not), counted as they open, on the launching thread, so a count
/// read after a device read-back is exact. Always 0 on the CPU backend.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// The kernel launches so far (see [`LAUNCHES`]).
pub(crate) fn kernel_launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Counts cubecl's launch spans into [`LAUNCHES`].
struct LaunchCounter;

impl<S: Subscriber> Layer<S> for LaunchCounter {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `m` is cubecl's span around one kernel launch.
fn is_launch(m: &tracing::Metadata<'_>) -> bool {
    m.is_span() && m.name() == "launch_inner" && m.target().starts_with("cubecl_runtime")
}

/// The progress bar of the run, once a step event has made one.
type Bar = Arc<Mutex<Option<ProgressBar>>>;

/// Installs the subscriber; a second call (tests in one process) leaves the first in place.
pub(crate) fn init() {
    let terminal = std::io::stderr().is_terminal();
    let bar: Bar = Arc::default();
    let writer = BarWriter(bar.clone());
    let not_progress = move |m: &tracing::Metadata<'_>| {
        m.target() != hr_train::PROGRESS_BEGIN_TARGET
            && !(terminal && m.target() == hr_train::PROGRESS_TARGET)
    };
    let progress = terminal.then(|| ProgressLayer(bar.clone(), Mutex::default()));
    let launches = LaunchCounter.with_filter(filter_fn(is_launch));
    let result = match EnvFilter::try_from_default_env() {
        Ok(filter) => tracing_subscriber::registry()
            .with(launches)
            .with(progress)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer)
                    .with_ansi(terminal)
                    .with_filter(filter_fn(not_progress))
                    .with_filter(filter),
            )
            .try_init(),
        Err(_) => tracing_subscriber::registry()
            .with(launches)
            .with(progress.with_filter(LevelFilter::INFO))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer.clone())
                    .without_time()
                    .with_level(false)
                    .with_target(false)
                    .with_ansi(false)
                    .fmt_fields(message_only())
                    .with_filter(filter_fn(move |m| {
                        *m.level() == Level::INFO && not_progress(m)
                    })),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer)
                    .without_time()
                    .with_target(false)
                    .with_ansi(terminal)
                    .with_filter(LevelFilter::WARN),
            )
            .try_init(),
    };
    // Already installed: keep the first.
    drop(result);
}

/// Draws step events as a bar: `[elapsed] [####    ] step/steps ETA eta  summary`, the ETA
/// the average step of this process times the steps left (steady within a step), with when
/// and at which step the bar began.
struct ProgressLayer(Bar, Mutex<Option<(Instant, u64)>>);

#[derive(Default)]
struct StepFields {
    step: Option<u64>,
    steps: Option<u64>,
    last: bool,
    summary: String,
}

impl Visit for StepFields {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "step" => self.step = Some(value),
            "steps" => self.steps = Some(value),
            _ => {}
        }
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        if field.name() == "last" {
            self.last = value;
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let message = format!("{value:?}");
            // `step N/M: <summary>`: the bar shows N/M itself.
            self.summary = message
                .split_once(": ")
                .map_or(message.clone(), |(_, s)| s.to_owned());
        }
    }
}

impl<S: Subscriber> Layer<S> for ProgressLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let target = event.metadata().target();
        let begin = target == hr_train::PROGRESS_BEGIN_TARGET;
        if target != hr_train::PROGRESS_TARGET && !begin {
            return;
        }
        let mut fields = StepFields::default();
        event.record(&mut fields);
        let (Some(step), Some(steps)) = (fields.step, fields.steps) else {
            return;
        };
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut start = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        let bar = slot.get_or_insert_with(|| {
            let bar = ProgressBar::new(steps);
            bar.set_style(
                ProgressStyle::with_template("[{elapsed_precise}] [{bar:30}] {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("#>-"),
            );
            bar.enable_steady_tick(Duration::from_secs(1));
            // A resumed run starts part-way: the ETA counts only the steps made here.
            let first = if begin { step } else { step.saturating_sub(1) };
            bar.set_position(first);
            *start = Some((Instant::now(), first));
            bar
        });
        let eta = match *start {
            Some((at, first)) if step > first => {
                let per_step = at.elapsed().as_secs_f64() / (step - first) as f64;
                let left = Duration::from_secs_f64(per_step * steps.saturating_sub(step) as f64);
                format!("ETA {}", indicatif::HumanDuration(left))
            }
            _ => "ETA -".to_owned(),
        };
        let summary = if begin {
            "first step running"
        } else {
            &fields.summary
        };
        bar.set_message(format!("{eta}  {summary}"));
        bar.set_position(step);
        if fields.last {
            // Leave the bar where the run stopped, on its own line; later output starts below.
            bar.abandon();
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Writes each log line to stderr above the progress bar (if one is drawn), so lines and bar
/// never overwrite each other.
#[derive(Clone)]
struct BarWriter(Bar);

/// One log line, written when tracing drops it.
struct BarLine {
    bar: Bar,
    buf: Vec<u8>,
}

impl<'a> MakeWriter<'a> for BarWriter {
    type Writer = BarLine;

    fn make_writer(&'a self) -> Self::Writer {
        BarLine {
            bar: self.0.clone(),
            buf: Vec::new(),
        }
    }
}

impl Write for BarLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for BarLine {
    fn drop(&mut self) {
        let bar = self
            .bar
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let write = || {
            let _ = std::io::stderr().lock().write_all(&self.buf);
        };
        match bar {
            Some(bar) if !bar.is_finished() => bar.suspend(write),
            _ => write(),
        }
    }
}

/// Formats an event's message alone (its structured fields are for `RUST_LOG` readers).
fn message_only() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        if field.name() == "message" {
            write!(writer, "{value:?}")
        } else {
            Ok(())
        }
    })
}
