//! What rocBLAS supplies to the shared hot reload (`crate::reload`): its profile chosen and
//! opened as at start-up ([`super::choose_and_open`]: rank files read later are checked
//! against the registry entry chosen now), published whole ([`RocblasRuntime::publish`]).
//! Near-shape serving keeps the index of the rows loaded at start-up (its verdicts live in
//! the miss set by index).

use std::path::Path;

use tunedblas_core::profile::RankTable;
use tunedblas_core::table::{Action, Table};

use super::{choose_and_open, current_device, Opened, RocblasRuntime, Served};
use crate::lifecycle::Config;
use crate::reload::{diff, Changed, Reload, Reopened, Rows};

impl Reload for RocblasRuntime {
    type Rows = Opened;

    fn prefix(&self) -> &'static str {
        ""
    }

    fn served_name(&self) -> Option<&str> {
        self.served().name.as_deref()
    }

    fn reopen(
        &self,
        cfg: &Config,
        sha: &str,
        chosen: &mut dyn FnMut(Option<&Path>),
    ) -> Reopened<Opened> {
        let (mut opened, line) = choose_and_open(cfg, sha, chosen, |_, _| {});
        Reopened {
            name: opened.name.clone(),
            dir: opened.dir.clone(),
            line,
            problems: std::mem::take(&mut opened.problems),
            rows: opened,
        }
    }

    fn publish(&self, name: &str, opened: Opened) -> Changed {
        let single = opened.tables.single();
        let served = Served {
            tables: opened.tables,
            single,
            name: Some(name.to_owned()),
        };
        let device = current_device();
        let (added, changed, removed) =
            diff(table_of(self.served(), device), table_of(&served, device));
        RocblasRuntime::publish(self, served);
        Changed {
            added,
            changed,
            removed,
            device,
        }
    }
}

/// The table `served` gives calls on `device` (reading its rank file if needed).
fn table_of(served: &Served, device: i32) -> Option<&Table> {
    if let Some(t) = &served.single {
        return Some(t);
    }
    match served.tables.table_for(device) {
        RankTable::Ready(t) => Some(t),
        _ => None,
    }
}

impl Rows for Table {
    type Key = tunedblas_core::key::ProblemKey;
    type Action = Action;

    fn each(&self, f: &mut dyn FnMut(&Self::Key, &Action)) {
        for (k, e) in self.iter() {
            f(k, &e.action);
        }
    }

    fn action(&self, key: &Self::Key) -> Option<&Action> {
        self.get(key).map(|e| &e.action)
    }
}
