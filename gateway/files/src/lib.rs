//! The model sandbox's host-side file tools (work in progress).
