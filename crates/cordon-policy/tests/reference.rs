//! docs/policy.md is the policy reference generated from the schema: this fails when the
//! two differ, and rewrites the file when `CORDON_BLESS=1` is set.

use std::path::PathBuf;

#[test]
fn docs_policy_md_is_the_generated_reference() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/policy.md");
    let generated = cordon_policy::reference();
    if std::env::var_os("CORDON_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk != generated {
        let first = on_disk
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(on_disk.lines().count().min(generated.lines().count()));
        panic!(
            "{} is not the reference the schema generates (first difference at line {}); \
             regenerate it with `{}` and commit the result",
            path.display(),
            first + 1,
            cordon_policy::REGENERATE
        );
    }
}
