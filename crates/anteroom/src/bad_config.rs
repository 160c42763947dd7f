//! A configuration the node refuses: the error every command returns for it, which `main`
//! turns into exit code 64 (EX_USAGE) instead of 1.

/// A failure that has its own exit code.
#[derive(Debug)]
pub(crate) struct BadConfig(pub(crate) String);

impl std::fmt::Display for BadConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadConfig {}
