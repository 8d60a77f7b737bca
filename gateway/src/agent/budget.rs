//! A turn's budgets instead of a fixed step cap (docs/decisions.md, T4): model requests,
//! wall-clock time, and the same failing call repeated.

use crate::config::AgentSection;
use std::time::Duration;
use vis_providers::ToolCall;

pub const DEFAULT_MAX_STEPS: usize = 200;
pub const DEFAULT_MAX_MINUTES: u64 = 120;
pub const DEFAULT_REPEATED_FAILURES: usize = 3;

/// The limits of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub max_steps: usize,
    pub wall_clock: Duration,
    pub repeated_failures: usize,
}

impl Budgets {
    pub fn from_config(a: &AgentSection) -> Budgets {
        Budgets {
            max_steps: a.max_steps.filter(|n| *n > 0).unwrap_or(DEFAULT_MAX_STEPS),
            wall_clock: Duration::from_secs(
                60 * a
                    .max_minutes
                    .filter(|n| *n > 0)
                    .unwrap_or(DEFAULT_MAX_MINUTES),
            ),
            repeated_failures: a
                .repeated_failures
                .filter(|n| *n > 1)
                .unwrap_or(DEFAULT_REPEATED_FAILURES),
        }
    }
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets::from_config(&AgentSection::default())
    }
}

/// Watches a turn's calls for the same failing call made again and again.
#[derive(Debug, Default)]
pub struct LoopGuard {
    /// The last failing call (name and arguments, whitespace-normalised) and how many
    /// times in a row it failed.
    last: Option<(String, usize)>,
}

impl LoopGuard {
    /// Notes one call's outcome; returns the stop message once the same call has failed
    /// `limit` times in a row.
    pub fn observe(&mut self, call: &ToolCall, failed: bool, limit: usize) -> Option<String> {
        if !failed {
            self.last = None;
            return None;
        }
        let key = format!(
            "{}\u{0}{}",
            call.name,
            call.arguments
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
        let n = match &self.last {
            Some((k, n)) if *k == key => n + 1,
            _ => 1,
        };
        self.last = Some((key, n));
        (n >= limit).then(|| {
            format!(
                "stopped: the model made the same failing `{}` call {n} times in a row \
                 (agent.repeated_failures is {limit}); say how to proceed",
                call.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(args: &str) -> ToolCall {
        ToolCall {
            id: "x".into(),
            name: "python_execution".into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn the_same_failing_call_three_times_in_a_row_stops_the_turn() {
        let mut g = LoopGuard::default();
        assert_eq!(g.observe(&c("{\"code\": \"1/0\"}"), true, 3), None);
        assert_eq!(g.observe(&c("{\"code\":  \"1/0\"}"), true, 3), None);
        let stop = g.observe(&c("{\"code\": \"1/0\"}"), true, 3).unwrap();
        assert!(stop.contains("3 times in a row"), "{stop}");
    }

    #[test]
    fn a_success_or_another_call_in_between_starts_the_count_again() {
        let mut g = LoopGuard::default();
        g.observe(&c("a"), true, 3);
        g.observe(&c("a"), true, 3);
        g.observe(&c("a"), false, 3);
        assert_eq!(g.observe(&c("a"), true, 3), None);
        g.observe(&c("b"), true, 3);
        assert_eq!(g.observe(&c("a"), true, 3), None);
    }

    #[test]
    fn budgets_default_well_above_a_normal_turn_and_follow_the_configuration() {
        let b = Budgets::default();
        assert_eq!(b.max_steps, 200);
        let b = Budgets::from_config(&AgentSection {
            max_steps: Some(5),
            max_minutes: Some(1),
            repeated_failures: Some(4),
        });
        assert_eq!(
            (b.max_steps, b.wall_clock, b.repeated_failures),
            (5, Duration::from_secs(60), 4)
        );
    }
}
