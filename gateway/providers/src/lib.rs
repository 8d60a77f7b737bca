//! LLM provider clients. See ARCHITECTURE.md.
