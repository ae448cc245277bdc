//! Repositories that are local copies of remote ones (cloud repositories).
//! Before a scan that may load, the engine has them copy what changed; the
//! rest of the engine reads only the local folders. A model that could not
//! be copied keeps what it served, and shows why in the index.

use nereid_core::Error;
use nereid_repository::Scope;

use crate::handle::Engine;
use crate::options::{ControlMode, LoadFailure};

impl Engine {
    /// Refreshes every mirror for `scope`. Returns the models that could
    /// not be copied (each recorded as a failed load; versions that serve
    /// serve on) and, with an empty model name, the repositories that could
    /// not be listed.
    pub(crate) fn refresh_mirrors(&self, scope: Scope<'_>) -> Vec<LoadFailure> {
        let mut failures = Vec::new();
        for mirror in &self.inner.options.mirrors {
            match mirror.refresh(scope) {
                Ok(copies) => failures.extend(copies.into_iter().map(|failure| LoadFailure {
                    model: failure.model,
                    reason: failure.error.to_string(),
                })),
                Err(e) => {
                    let reason = e.to_string();
                    tracing::error!(repository = %mirror.origin(), error = %reason, "cannot read the model repository");
                    failures.push(LoadFailure {
                        model: String::new(),
                        reason,
                    });
                }
            }
        }
        for failure in failures.iter().filter(|f| !f.model.is_empty()) {
            let replaced = self
                .inner
                .registry
                .write()
                .record_failure(&failure.model, failure.reason.clone());
            drop(replaced);
        }
        failures
    }

    /// What startup copies: every model, or in explicit model control only
    /// the startup models.
    pub(crate) fn startup_scope(&self) -> Scope<'_> {
        let wanted = &self.inner.control.startup_models;
        match self.control_mode() {
            ControlMode::Explicit if !wanted.iter().any(|m| m == "*") => Scope::Models(wanted),
            _ => Scope::All,
        }
    }

    /// Copies `name` (again, if it changed) before an explicit load finds
    /// it; fails when it, or its repository, could not be read.
    pub(crate) fn refresh_for_load(&self, name: &str) -> Result<(), Error> {
        if self.inner.options.mirrors.is_empty() {
            return Ok(());
        }
        let names = [name.to_string()];
        let failures = self.refresh_mirrors(Scope::Models(&names));
        match failures
            .into_iter()
            .find(|f| f.model.is_empty() || f.model == name)
        {
            None => Ok(()),
            Some(failure) => Err(Error::internal(format!(
                "failed to load '{name}': {}",
                failure.reason
            ))),
        }
    }

    /// `text` with the local paths of copied models written as the objects
    /// they were copied from.
    pub(crate) fn in_origins(&self, text: &str) -> String {
        nereid_repository::name_origins(&self.inner.options.mirrors, text)
    }

    /// `error` with its message read through [`Engine::in_origins`].
    pub(crate) fn error_in_origins(&self, error: Error) -> Error {
        if self.inner.options.mirrors.is_empty() {
            return error;
        }
        Error::new(error.kind(), self.in_origins(error.message()))
    }
}
