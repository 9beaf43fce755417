//! Collects every mistake of one `#[job]` so a single build reports them all.

/// Errors found so far, combined into one `syn::Error` (which renders as one
/// `compile_error!` per message).
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn push_spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// `Err` with every error pushed, if there was any.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }

    /// The message of every error pushed, in order (for tests).
    #[cfg(test)]
    pub(crate) fn messages(self) -> Vec<String> {
        self.finish().err().map(messages).unwrap_or_default()
    }
}

/// The message of every error combined in `error`, in order (for tests).
#[cfg(test)]
pub(crate) fn messages(error: syn::Error) -> Vec<String> {
    error.into_iter().map(|e| e.to_string()).collect()
}
