//! The layering docs/DEVELOPMENT.md draws, checked on the resolved dependency graph: only `train`
//! (and what is built on it: run, bench, the binary) links burn — the viewer, the wire, the
//! store and the exports build without the trainer; only the store, the exports and what sits
//! above them on the run side link polars — the viewer side (tui, client, protocol) reads no
//! Parquet; only the widgets, the workbench and what draws with them link ratatui.

/// The crates `package` links (its normal dependencies, transitively, for this machine), by name.
fn links(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(["--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    crate::harness::succeeded(&out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn only_the_trainer_side_links_burn() {
    let burn = |package: &str| -> Vec<String> {
        let mut b: Vec<String> = links(package)
            .into_iter()
            .filter(|c| c.starts_with("burn"))
            .collect();
        b.dedup();
        b
    };
    for side in [
        "conelab-tui",
        "conelab-client",
        "conelab-protocol",
        "conelab-catalog",
        "conelab-export",
        "conelab-store",
        "conelab-widgets",
        "conelab-core",
    ] {
        assert_eq!(burn(side), Vec::<String>::new(), "{side} links burn");
    }
    // The check can fail: the trainer does link it.
    assert!(burn("conelab-train").contains(&"burn".to_string()));
}

#[test]
fn core_speaks_no_command_line() {
    // Core's named settings (`Choice`) are parsed by the run crate's clap parser: the shared
    // vocabulary builds without clap.
    let clap: Vec<String> = links("conelab-core")
        .into_iter()
        .filter(|c| c.starts_with("clap"))
        .collect();
    assert_eq!(clap, Vec::<String>::new(), "conelab-core links clap");
    assert!(links("conelab-run").contains(&"clap".to_string()));
}

/// The crates that may link `library` and those that must not: between them every crate of the
/// workspace, so a new one must say which side it is on.
fn check_side(library: &str, allowed: &[&str], forbidden: &[&str]) {
    for package in allowed.iter().chain(forbidden) {
        let links = links(package).iter().any(|c| c == library);
        let may = allowed.contains(package);
        assert!(may || !links, "{package} links {library}");
    }
    // The check can fail: the first allowed crate does link it.
    assert!(links(allowed[0]).iter().any(|c| c == library));
}

#[test]
fn only_the_store_and_the_run_side_above_it_link_polars() {
    check_side(
        "polars",
        &[
            "conelab-store",
            "conelab-export",
            "conelab-catalog",
            "conelab-run",
            "conelab-bench",
            "conelab",
        ],
        &[
            "conelab-base",
            "conelab-data",
            "conelab-metrics",
            "conelab-core",
            "conelab-protocol",
            "conelab-client",
            "conelab-widgets",
            "conelab-tui",
            "conelab-train",
        ],
    );
}

#[test]
fn only_the_widgets_and_what_draws_with_them_link_ratatui() {
    check_side(
        "ratatui",
        &["conelab-widgets", "conelab-tui", "conelab-bench", "conelab"],
        &[
            "conelab-base",
            "conelab-data",
            "conelab-metrics",
            "conelab-core",
            "conelab-protocol",
            "conelab-client",
            "conelab-catalog",
            "conelab-store",
            "conelab-export",
            "conelab-train",
            "conelab-run",
        ],
    );
}
