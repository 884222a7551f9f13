//! What the Lt backends supply to the shared hot reload (`crate::reload`): the profile
//! chosen and loaded as at start-up ([`super::choose_and_open`]), published whole
//! ([`LtRuntime::publish`]). A new table builds its call-key index again and starts with
//! an empty repeated-miss cache (`LtTable::misses`), so a call key that missed before the
//! reload looks again and finds its new row; a row's rebuilt algorithm, and its strikes, are
//! the new entry's own.

use std::path::Path;

use tunedblas_core::cublaslt::{LtAction, LtKey, LtLoaded, LtTable};

use super::{choose_and_open, LtRuntime, LtServed};
use crate::lifecycle::Config;
use crate::reload::{diff, Changed, Reload, Reopened, Rows};

impl Reload for LtRuntime {
    type Rows = LtLoaded;

    fn prefix(&self) -> &'static str {
        match self.spec.lib {
            tunedblas_core::cublaslt::LtLib::Cublaslt => "cuBLASLt: ",
            tunedblas_core::cublaslt::LtLib::Hipblaslt => "hipBLASLt: ",
        }
    }

    fn served_name(&self) -> Option<&str> {
        self.served().name.as_deref()
    }

    fn reopen(
        &self,
        cfg: &Config,
        sha: &str,
        chosen: &mut dyn FnMut(Option<&Path>),
    ) -> Reopened<LtLoaded> {
        choose_and_open(self.spec, cfg, sha, &self.lib_path, chosen).0
    }

    fn publish(&self, name: &str, rows: LtLoaded) -> Changed {
        (self.spec.loaded)(&rows);
        let served = LtServed::new(rows, Some(name.to_owned()));
        let device = (self.spec.device)();
        let changed = diff(self.served().table_for(device), served.table_for(device));
        // Not published: another build's runtime serves now (nothing changed here).
        let (added, changed, removed) = if LtRuntime::publish(self, served) {
            changed
        } else {
            (0, 0, 0)
        };
        Changed {
            added,
            changed,
            removed,
            device,
        }
    }
}

impl Rows for LtTable {
    type Key = LtKey;
    type Action = LtAction;

    fn each(&self, f: &mut dyn FnMut(&LtKey, &LtAction)) {
        for (k, e) in self.iter() {
            f(k, &e.action);
        }
    }

    fn action(&self, key: &LtKey) -> Option<&LtAction> {
        self.get(key).map(|e| &e.action)
    }
}
