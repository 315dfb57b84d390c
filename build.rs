//! Stamps the git revision of the source into the binary (the metrics store records it).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let revision = Command::new("git")
        .args(["describe", "--always", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(r) = revision {
        println!("cargo:rustc-env=CONELAB_GIT_REVISION={r}");
    }
}
