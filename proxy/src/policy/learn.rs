//! Learn mode (docs/decisions.md, L1): a request the policy would deny for allowlist
//! reasons is allowed and its record says what enforcement would have answered.
//!
//! Allowlist reasons are the ones a proposal can lift: a host not on a strict allowlist
//! (`blocked-by-allowlist`, or `denied_domains: ['*']` used as "nothing but the allowlist"),
//! a method or path a rule does not list, a port a rule does not list. Explicit refusals
//! stay refusals in learn mode: a specific `denied_domains` entry, an `access: none` rule,
//! the deny-all of a broken policy. The SSRF floor and the network filters run after this
//! step and are not touched by it at all.

use super::compile::Policy;
use super::decide::{decide, Allowed, DecideInput, WouldDeny};
use crate::deny::{kind, Denial, DenyClass};

/// Could a proposal lift this denial (an allowlist reason, not an explicit refusal)?
fn learnable(policy: &Policy, host: &str, d: &Denial) -> bool {
    if policy.deny_all.is_some() {
        return false;
    }
    match d.class {
        DenyClass::Policy(k) if k == kind::ALLOWLIST || k == kind::PORT_POLICY => true,
        // only `denied_domains: ['*']` (a specific entry matched first otherwise)
        DenyClass::Policy(k) if k == kind::DENYLIST => !policy.explicitly_denied(host),
        DenyClass::Policy(k) if k == kind::METHOD_POLICY => {
            !policy.select_rule(host).is_some_and(|r| r.closed)
        }
        _ => false,
    }
}

/// [`decide`], with learn mode applied: when the policy learns, a denial for an allowlist
/// reason becomes an allow carrying [`WouldDeny`].
pub fn decide_or_learn(policy: &Policy, req: DecideInput<'_>) -> Result<Allowed, Denial> {
    match decide(policy, req) {
        Err(d) if policy.is_learning() && learnable(policy, req.host, &d) => Ok(Allowed {
            decider: d.decider,
            rule_host: d.rule_host.clone(),
            would_deny: Some(WouldDeny {
                error_kind: d.error_kind().unwrap_or(kind::ALLOWLIST).to_string(),
                reason: d.reason,
            }),
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::Mode;

    fn learning(y: &str) -> Policy {
        Policy::from_yaml(&format!("mode: learn\n{y}")).unwrap()
    }
    fn ask(p: &Policy, m: Option<&str>, host: &str, port: u16) -> Result<Allowed, Denial> {
        decide_or_learn(
            p,
            DecideInput {
                method: m,
                host,
                path: Some("/x"),
                port: Some(port),
            },
        )
    }

    #[test]
    fn learn_mode_allows_what_the_allowlist_would_deny_and_says_so() {
        let p = learning(
            "allowed_domains: [a.test]\nrules: [{host: a.test, access: ro, ports: [80]}]\n",
        );
        assert!(p.is_learning());
        let a = ask(&p, Some("GET"), "a.test", 80).unwrap();
        assert_eq!(a.would_deny, None, "allowed by the policy itself");
        let a = ask(&p, Some("GET"), "b.test", 80).unwrap();
        let w = a.would_deny.unwrap();
        assert_eq!(w.error_kind, "blocked-by-allowlist");
        assert_eq!(w.reason, "host not permitted: b.test");
        let a = ask(&p, Some("POST"), "a.test", 80).unwrap();
        assert_eq!(a.would_deny.unwrap().error_kind, "blocked-by-method-policy");
        assert_eq!(a.rule_host.as_deref(), Some("a.test"));
        let a = ask(&p, Some("GET"), "a.test", 8080).unwrap();
        assert_eq!(a.would_deny.unwrap().error_kind, "blocked-by-port-policy");
        let star = learning("denied_domains: ['*']\nallowed_domains: [a.test]\n");
        assert!(ask(&star, None, "c.test", 443)
            .unwrap()
            .would_deny
            .is_some());
    }

    #[test]
    fn explicit_refusals_still_deny_in_learn_mode() {
        let p = learning("denied_domains: [evil.test]\nrules: [{host: shut.test, access: none}]\n");
        let d = ask(&p, Some("GET"), "x.evil.test", 80).unwrap_err();
        assert_eq!(d.error_kind(), Some("blocked-by-denylist"));
        let d = ask(&p, Some("GET"), "shut.test", 80).unwrap_err();
        assert_eq!(d.error_kind(), Some("blocked-by-method-policy"));
        let broken = Policy::deny_all(None).with_mode(Mode::Learn);
        assert!(!broken.is_learning());
        assert!(ask(&broken, Some("GET"), "a.test", 80).is_err());
    }

    #[test]
    fn enforce_mode_and_the_override_switch_learning_off_and_on() {
        let p = Policy::from_yaml("allowed_domains: [a.test]\n").unwrap();
        assert!(ask(&p, Some("GET"), "b.test", 80).is_err());
        let p = p.with_mode(Mode::Learn);
        assert!(ask(&p, Some("GET"), "b.test", 80).is_ok());
        let p = learning("allowed_domains: [a.test]\n").with_mode(Mode::Enforce);
        assert!(ask(&p, Some("GET"), "b.test", 80).is_err());
        let bare = learning("");
        assert!(bare.is_learning() && bare.is_unrestricted());
        assert_eq!(
            ask(&bare, Some("GET"), "b.test", 80).unwrap().would_deny,
            None
        );
    }
}
