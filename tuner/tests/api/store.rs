//! The profile store (`tunedblas_tuner::store`) through its public API.

use std::path::PathBuf;

use tunedblas_tuner::error::{Error, Result};
use tunedblas_tuner::store::*;

#[test]
fn default_names_of_distribution_builds() {
    let build = |version: &str| Build {
        library: "rocblas",
        path: PathBuf::from("/usr/lib/x86_64-linux-gnu/librocblas.so.0"),
        sha256: "0".repeat(64),
        version: version.into(),
        arch: "gfx1030".into(),
    };
    assert_eq!(build("2.47.0.").default_name(), "rocblas-2.47.0");
    assert_eq!(build("4.4.1.").default_name(), "rocblas-4.4.1");
    assert_eq!(
        build("5.6.0.8d1ae90e").default_name(),
        "rocblas-5.6.0.8d1ae90e"
    );
    assert_eq!(build("unknown").default_name(), "rocblas-unknown");
}

#[test]
fn utc_now_is_a_plausible_timestamp() {
    let t = utc_now();
    assert_eq!(t.len(), 20, "{t}");
    assert!(
        t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
        "{t}"
    );
    let year: i32 = t[..4].parse().unwrap();
    assert!((2024..2100).contains(&year), "{t}");
}

#[test]
fn a_profile_is_written_for_every_rank_with_its_library_in_one_transaction() {
    let dir = std::env::temp_dir().join(format!("tunedblas-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir).unwrap();
    let build = Build {
        library: "cublaslt",
        path: PathBuf::from("/x/libcublasLt.so.13"),
        sha256: "ab".repeat(32),
        version: "130100".into(),
        arch: "unknown".into(),
    };
    let folder = store.folder_for(&build, None).unwrap();
    assert_eq!(folder.name, "cublaslt-130100");
    let fields = [
        ("cublaslt_version", "130100".to_string()),
        ("library", "cublaslt".into()),
    ];
    let text = "Validator,TUNEDBLAS_BACKEND,cublaslt\nop,sig,Default,0.01\n";
    store
        .transaction(|tx| {
            tx.write_profile(&folder, &build, text.into(), 2, "tuned", &fields)?;
            tx.record(&folder, &build, serde_json::json!({ "kind": "tune" }))
        })
        .unwrap();
    for rank in [0, 1] {
        assert_eq!(
            std::fs::read_to_string(rank_file(&folder.dir, rank)).unwrap(),
            text
        );
    }
    assert_eq!(store.read_text(&folder).unwrap(), text);
    let reg = store.registry().unwrap();
    let e = reg.get("cublaslt-130100").unwrap();
    assert_eq!(
        (e.lib_sha256.as_str(), e.rows_per_rank, e.rocblas.as_deref()),
        (build.sha256.as_str(), Some(1), None)
    );
    assert_eq!(e.extra["library"], "cublaslt");
    let prov = std::fs::read_to_string(provenance_file(&folder.dir)).unwrap();
    assert!(
        prov.contains("\"kind\": \"tune\"") && !prov.contains("rocblas"),
        "{prov}"
    );
    // A failing transaction writes nothing; fewer ranks remove the others.
    let before = std::fs::read_to_string(store.registry_path()).unwrap();
    let failed: Result<()> = store.transaction(|tx| {
        tx.write_profile(&folder, &build, "other\n".into(), 1, "tuned", &fields)?;
        Err(Error::failed("disk full"))
    });
    assert!(failed.is_err());
    assert_eq!(
        std::fs::read_to_string(store.registry_path()).unwrap(),
        before
    );
    assert!(rank_file(&folder.dir, 1).exists());
    store
        .transaction(|tx| tx.write_profile(&folder, &build, text.into(), 1, "tuned", &fields))
        .unwrap();
    assert!(!rank_file(&folder.dir, 1).exists());
    let _ = std::fs::remove_dir_all(&dir);
}
