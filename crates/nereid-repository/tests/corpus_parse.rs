//! Every `config.pbtxt` in Triton's own repository parses.

mod common;

use nereid_repository::{insert_list_colons, parse_config_text};

#[test]
fn every_triton_config_parses() {
    let files = common::corpus_files(|p| p.file_name().is_some_and(|n| n == "config.pbtxt"));
    assert!(
        files.len() > 300,
        "only {} config.pbtxt files found in the corpus",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        if let Err(err) = parse_config_text(&text) {
            failures.push(format!("{}: {err}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn prepass_is_needed_and_idempotent_on_the_corpus() {
    let files = common::corpus_files(|p| p.file_name().is_some_and(|n| n == "config.pbtxt"));
    let mut rewritten = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let once = insert_list_colons(&text);
        assert_eq!(insert_list_colons(&once), once, "{}", path.display());
        assert_eq!(
            once.lines().count(),
            text.lines().count(),
            "{}",
            path.display()
        );
        rewritten += usize::from(once != text);
    }
    assert!(
        rewritten > 100,
        "only {rewritten} files needed the pre-pass"
    );
}
