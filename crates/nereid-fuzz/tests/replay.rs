//! Replays the committed inputs of every fuzz target: the seeds in
//! `fuzz/seeds/<target>/` and the inputs that once crashed a target, kept in
//! `fuzz/regressions/<target>/`. Also runs the `config.pbtxt` check on every
//! config in Triton's own repository.

mod seeds;

use std::path::{Path, PathBuf};

use nereid_fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn committed_seeds_are_current() {
    for (target, name, input) in seeds::all() {
        let path = fuzz_dir().join("seeds").join(target).join(&name);
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == input,
            "{} is stale; rewrite the seeds with `cargo test -p nereid-fuzz --test replay -- --ignored write_seeds`",
            path.display()
        );
    }
}

#[test]
fn seeds_and_regressions_pass_every_target() {
    for (target, check) in TARGETS {
        let seeds = files_in(&fuzz_dir().join("seeds").join(target));
        assert!(!seeds.is_empty(), "no seeds for {target}");
        let regressions = files_in(&fuzz_dir().join("regressions").join(target));
        for path in seeds.iter().chain(&regressions) {
            let input = std::fs::read(path).expect("a committed input");
            check(&input);
        }
    }
}

#[test]
fn every_triton_config_passes_the_config_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus");
    let mut stack = vec![root];
    let mut checked = 0;
    while let Some(dir) = stack.pop() {
        for path in files_in(&dir) {
            if path.file_name().is_some_and(|n| n == "config.pbtxt") {
                nereid_fuzz::config_pbtxt::check(&std::fs::read(&path).expect("a config"));
                checked += 1;
            }
        }
        let entries = std::fs::read_dir(&dir).expect("a corpus folder");
        stack.extend(
            entries
                .map(|e| e.expect("an entry").path())
                .filter(|p| p.is_dir()),
        );
    }
    assert!(checked > 300, "only {checked} configs found");
}

/// Rewrites `fuzz/seeds/` from [`seeds::all`].
#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the seeds"]
fn write_seeds() {
    for (target, name, input) in seeds::all() {
        let dir = fuzz_dir().join("seeds").join(target);
        std::fs::create_dir_all(&dir).expect("a seeds folder");
        std::fs::write(dir.join(name), input).expect("a seed");
    }
}
