//! Sign-in flows the gateway holds open for the phone, keyed by a random flow id. Only the
//! public part (kind, instructions, URL) ever travels; a key typed into an `api-key` flow
//! goes straight to the saved-provider file. Unfinished flows are forgotten after
//! [`FLOW_TTL_MS`].

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use vis_companion_api::providers::{AuthFlow, FlowKind};

/// How long an unfinished flow can be resumed.
pub const FLOW_TTL_MS: i64 = 15 * 60 * 1000;

/// Progress of a flow run by an extension's callback.
#[derive(Debug, Default)]
pub struct Progress {
    /// Instruction lines the callback printed so far.
    pub lines: Vec<String>,
    /// `Some(Ok(message))` signed in, `Some(Err(reason))` failed, `None` still running.
    pub verdict: Option<Result<String, String>>,
}

#[derive(Debug, Clone)]
pub struct Flow {
    pub public: AuthFlow,
    /// Set for flows run by an extension's `auth_fn`.
    pub progress: Option<Arc<Mutex<Progress>>>,
}

#[derive(Default)]
pub struct Flows {
    map: Mutex<HashMap<String, Flow>>,
}

impl Flows {
    fn sweep(&self, now: i64) {
        self.map.lock().retain(|_, f| f.public.expires_at > now);
    }

    /// Opens a flow and answers its public view.
    pub fn open(
        &self,
        provider_id: &str,
        kind: FlowKind,
        instructions: Vec<String>,
        progress: Option<Arc<Mutex<Progress>>>,
    ) -> AuthFlow {
        let now = vis_companion_api::sse::now_ms();
        self.sweep(now);
        let public = AuthFlow {
            flow_id: uuid::Uuid::new_v4().to_string(),
            provider_id: provider_id.to_string(),
            kind,
            url: None,
            verification_uri: None,
            interval_ms: progress.as_ref().map(|_| 2000),
            expires_at: now + FLOW_TTL_MS,
            instructions,
        };
        self.map.lock().insert(
            public.flow_id.clone(),
            Flow {
                public: public.clone(),
                progress,
            },
        );
        public
    }

    /// The open flow `flow_id` of `provider_id`.
    pub fn get(&self, provider_id: &str, flow_id: &str) -> Option<Flow> {
        self.sweep(vis_companion_api::sse::now_ms());
        self.map
            .lock()
            .get(flow_id)
            .filter(|f| f.public.provider_id == provider_id)
            .cloned()
    }

    /// Forgets a flow; answers whether it was open.
    pub fn close(&self, flow_id: &str) -> bool {
        self.map.lock().remove(flow_id).is_some()
    }
}

/// The first `http(s)://` address in instruction lines (a device flow's verification page).
pub fn first_url(lines: &[String]) -> Option<String> {
    lines.iter().find_map(|l| {
        let at = l.find("https://").or_else(|| l.find("http://"))?;
        let url: String = l[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | '>' | '"' | '\''))
            .collect();
        Some(url.trim_end_matches(['.', ',']).to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_is_found_only_under_its_own_provider_and_closes_once() {
        let f = Flows::default();
        let open = f.open("openai", FlowKind::ApiKey, vec!["paste a key".into()], None);
        assert!(f.get("anthropic", &open.flow_id).is_none());
        assert!(f.get("openai", &open.flow_id).is_some());
        assert!(f.close(&open.flow_id));
        assert!(!f.close(&open.flow_id));
        assert!(f.get("openai", &open.flow_id).is_none());
    }

    #[test]
    fn the_verification_page_is_read_from_the_instructions() {
        let lines = vec![
            "Sign in:".to_string(),
            "Open https://example.test/device, then enter ABCD-1234.".to_string(),
        ];
        assert_eq!(
            first_url(&lines).as_deref(),
            Some("https://example.test/device")
        );
        assert_eq!(first_url(&["no link".to_string()]), None);
    }
}
