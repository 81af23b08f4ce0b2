//! What a phase decided, as a value: the condition it reports, where the migration goes, and
//! when to look again. Each phase observes (I/O), hands what it saw to a pure function that
//! returns an [`Outcome`], and [`Step::settle`] applies it; the pure functions are the
//! table-tested part of each phase.

use super::*;

/// A condition to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Said {
    pub(super) type_: &'static str,
    pub(super) ok: bool,
    pub(super) reason: String,
    pub(super) message: String,
}

impl Said {
    pub(super) fn yes(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Said {
            type_,
            ok: true,
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub(super) fn no(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Said {
            type_,
            ok: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// When to reconcile again (a watch brings the controller back sooner when anything changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// At once: the status goes first, the next reconcile acts on it.
    Soon,
    /// After this long.
    After(Duration),
    /// At the current phase's deadline for this timeout.
    Deadline(Duration),
    /// Only when something watched changes.
    Change,
}

/// A phase's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Report and stay in the phase.
    Wait(Said, Wake),
    /// Report and enter the next phase, saying why.
    Enter(Said, MigrationPhase, String),
    /// Report (if anything) and roll back for `cause`, saying why.
    Rollback(Option<Said>, &'static str, String),
    /// Fail at validation: nothing was touched.
    Invalid(&'static str, String),
}

impl Outcome {
    /// Validation failed for `reason`.
    pub(super) fn invalid(reason: &'static str, message: impl Into<String>) -> Self {
        Outcome::Invalid(reason, message.into())
    }
}

impl Step {
    /// Applies a phase's decision to the status and says when to look again.
    /// Writes what `s` says as its condition.
    pub(super) fn say(&mut self, s: &Said) {
        let status = if s.ok { TRUE } else { FALSE };
        self.condition(s.type_, status, &s.reason, &s.message);
    }

    pub(super) fn settle(&mut self, outcome: Outcome) -> Action {
        let say = |step: &mut Step, s: &Said| step.say(s);
        let wake = match outcome {
            Outcome::Wait(s, wake) => {
                say(self, &s);
                wake
            }
            Outcome::Enter(s, next, why) => {
                say(self, &s);
                self.enter(next, &why);
                Wake::Soon
            }
            Outcome::Rollback(s, cause, why) => {
                if let Some(s) = s {
                    say(self, &s);
                }
                self.rollback(cause, &why);
                Wake::Soon
            }
            Outcome::Invalid(reason, message) => {
                self.fail_validation(reason, &message);
                Wake::Soon
            }
        };
        match wake {
            Wake::Soon => Action::requeue(Duration::from_millis(10)),
            Wake::After(d) => Action::requeue(d),
            Wake::Deadline(timeout) => until(self, timeout),
            Wake::Change => Action::await_change(),
        }
    }
}

/// What deleting a migration in `phase` does: nothing was touched before Initializing (it
/// fails at once); in flight, it rolls back first; past that, it finishes what it does.
pub(super) fn on_delete(phase: MigrationPhase) -> Option<Outcome> {
    match phase {
        MigrationPhase::Pending | MigrationPhase::Validating => Some(Outcome::invalid(
            reasons::ERROR,
            "deleted before any cluster was touched",
        )),
        MigrationPhase::Initializing | MigrationPhase::Deploying | MigrationPhase::Registering => {
            Some(Outcome::Rollback(
                None,
                "Deleted",
                "the migration was deleted in flight; rolling back first".into(),
            ))
        }
        _ => None,
    }
}
