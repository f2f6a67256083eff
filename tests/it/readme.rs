//! The README stays a user's guide: under 400 lines, with nothing dated in it (measured figures
//! with their dates belong in docs/performance.md, history in CHANGELOG.md, work in progress in
//! the issues).

/// The dates (`YYYY-MM-DD`, a year of this century) in `text`, except inside a name such as a
/// model's (`gpt-4o-2024-08-06`), which is not a date of the project's.
fn dates(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let digit = |i: usize, n: usize| {
        b.get(i..i + n)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let mut out = Vec::new();
    for i in 0..b.len().saturating_sub(9) {
        let date = b[i..].starts_with(b"20")
            && digit(i, 4)
            && b[i + 4] == b'-'
            && digit(i + 5, 2)
            && b[i + 7] == b'-'
            && digit(i + 8, 2);
        let in_name = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-');
        if date && !in_name {
            out.push(text[i..i + 10].to_string());
        }
    }
    out
}

#[test]
fn the_readme_is_a_guide_under_400_lines_with_nothing_dated() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 400,
        "README.md has {lines} lines: move detail to docs/"
    );
    assert_eq!(
        dates(&readme),
        Vec::<String>::new(),
        "dated text in README.md"
    );
    let lower = readme.to_lowercase();
    for marker in [
        "(issue ",
        "issue #",
        "this round",
        "being wired",
        "not built yet",
    ] {
        assert!(
            !lower.contains(marker),
            "README.md says {marker:?}: that is history or a plan"
        );
    }
}

#[test]
fn dates_are_found_outside_names_only() {
    assert_eq!(dates("on 2026-12-05, measured"), vec!["2026-12-05"]);
    assert_eq!(dates("(2026-12-05)"), vec!["2026-12-05"]);
    assert!(dates("model gpt-4o-2024-08-06 and v12026-01-01").is_empty());
    assert!(dates("2026-1-05 or 20261205").is_empty());
}
