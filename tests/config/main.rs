//! The configuration: files and their located errors, a configuration
//! embedded in an application's own, the checker agreeing with the runtime,
//! the path matcher against the router's dispatch, and the dashboards and
//! alerts against the metrics catalogue.

mod checker_agrees;
mod dashboards;
mod embedded;
mod explain_agrees;
mod files;
mod path_matcher;

/// Held by a test that sets a `RATELIMIT__*` variable and by each test that
/// reads the environment's overrides (`Config::from_file`): the suite's
/// tests share one process environment.
fn env_lock() -> std::sync::MutexGuard<'static, ()> {
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
