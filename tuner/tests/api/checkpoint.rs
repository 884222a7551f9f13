//! The checkpoint that makes a campaign resumable (`tunedblas_tuner::checkpoint`) through
//! its public API.

use std::io::Write;

use tunedblas_tuner::checkpoint::*;

#[test]
fn an_interrupted_campaign_resumes_with_what_it_finished() {
    let dir = std::env::temp_dir().join(format!("tunedblas-checkpoint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let shapes = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let header = || Header::new("cublaslt sha".into(), shapes(&["a", "b", "c"]));
    let (mut cp, done) = Checkpoint::open::<String>(&dir, header(), false).unwrap();
    assert!(done.is_empty());
    cp.append(&"a done".to_string()).unwrap();
    cp.append(&"b done".to_string()).unwrap();
    drop(cp); // killed
              // A torn last line (killed mid-write) is ignored: that shape is tuned again.
    let path = dir.join(".campaign.partial.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"\"c do").unwrap();
    drop(f);
    // Another campaign (other shapes, another build) may not take the checkpoint.
    let other = Header::new("cublaslt sha".into(), shapes(&["a", "d"]));
    let e = Checkpoint::open::<String>(&dir, other.clone(), false)
        .err()
        .unwrap();
    assert!(
        e.message
            .contains("unfinished campaign of other shapes (2 of 3 done)"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains(" --fresh\n") || e.message.ends_with(" --fresh"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("2 of its shapes are not among this command's (b; c)"),
        "{}",
        e.message
    );
    // More shapes (the miss folder grew): what was finished comes back, the campaign
    // goes on with the new shapes too, and the same inputs again resume that.
    let more = || Header::new("cublaslt sha".into(), shapes(&["a", "b", "c", "e"]));
    let (cp, done) = Checkpoint::open::<String>(&dir, more(), false).unwrap();
    assert_eq!(done, ["a done", "b done"]);
    assert_eq!(cp.grown_from, Some(3));
    drop(cp);
    let e = Checkpoint::open::<String>(&dir, header(), false)
        .err()
        .unwrap();
    assert!(e.message.contains("(2 of 4 done)"), "{}", e.message);
    let (cp, done) = Checkpoint::open::<String>(&dir, more(), false).unwrap();
    assert_eq!((done.len(), cp.grown_from), (2, None));
    cp.retire(&dir, &["a done".to_string()]);
    assert!(!path.exists() && dir.join("campaigns").read_dir().unwrap().count() == 1);
    // Finished: a rerun starts afresh; --fresh discards an unfinished one.
    let (mut cp, done) = Checkpoint::open::<String>(&dir, header(), false).unwrap();
    assert!(done.is_empty());
    cp.append(&"a done".to_string()).unwrap();
    drop(cp);
    let (_, done) = Checkpoint::open::<String>(&dir, other, true).unwrap();
    assert!(done.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
