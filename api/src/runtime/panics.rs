//! A panic in one reconcile fails that object's reconcile, not the process.
//!
//! kube-runtime polls each reconcile inside the controller's own stream, so a panic there
//! ends the controller, and supervision then ends the process: one object that reaches a
//! bug would stop every replica in turn. [`unwinding`] catches the panic where the
//! reconcile runs and hands it to the controller as an error of that object, which its
//! error policy retries at a slower pace while every other object goes on.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// How long an object whose reconcile panicked waits before the next try: a bug does not
/// go away on its own, and a fast retry would spend the controller on it.
pub const PANIC_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// A reconcile that panicked, with the panic's message.
#[derive(Debug, thiserror::Error)]
#[error("the reconcile panicked ({0}); it is retried, every other object goes on")]
pub struct Panicked(pub String);

/// Runs `reconcile`, turning a panic inside it into [`Panicked`].
///
/// A lock the reconcile held when it panicked is poisoned: the binaries read a poisoned lock
/// either as empty (a memo, rebuilt from what is watched) or as it is (what it holds is
/// re-read from status at each reconcile), never as a reason to fail.
pub async fn unwinding<T, E: From<Panicked>>(
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match AssertUnwindSafe(reconcile).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            tracing::error!(panic = %message, "a reconcile panicked; its object is retried later");
            Err(Panicked(message).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum Error {
        Panicked(String),
    }

    impl From<Panicked> for Error {
        fn from(p: Panicked) -> Self {
            Error::Panicked(p.0)
        }
    }

    #[tokio::test]
    async fn a_panic_becomes_the_objects_error_and_a_result_passes_through() {
        let ok: Result<u8, Error> = unwinding(async { Ok(7) }).await;
        assert!(matches!(ok, Ok(7)));
        let formatted: Result<u8, Error> =
            unwinding(async { panic!("index {} out of range", 3) }).await;
        assert!(
            matches!(&formatted, Err(Error::Panicked(m)) if m == "index 3 out of range"),
            "{formatted:?}"
        );
        let plain: Result<u8, Error> = unwinding(async { panic!("boom") }).await;
        assert!(
            matches!(&plain, Err(Error::Panicked(m)) if m == "boom"),
            "{plain:?}"
        );
    }
}
