//! The layers of the `vramtrace` library, held to the table that
//! docs/architecture.md prints ("Layers of the `vramtrace` library"): the
//! test reads the table from the doc, so the two cannot drift apart.
//!
//! Every module of the library (outside its tests) must use, through
//! `crate::` paths and `super::` paths that climb to the crate's root,
//! exactly the modules its row lists; each of those must sit in a row above
//! it (nothing imports upward, and there are no cycles); and every module
//! the crate declares must have a row.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The doc's heading over the table.
const HEADING: &str = "## Layers of the `vramtrace` library";

/// One row of the table: the modules it names, and those they use.
#[derive(Debug)]
struct Row {
    modules: Vec<String>,
    uses: BTreeSet<String>,
}

/// The names in backticks in a cell of the table.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The table under [`HEADING`] in `doc`, in its order.
fn table(doc: &str) -> Vec<Row> {
    let section = doc
        .split(HEADING)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has no section {HEADING:?}"));
    let mut rows = Vec::new();
    let mut started = false;
    for line in section.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            if started {
                break;
            }
            continue;
        }
        started = true;
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        if cells[0].trim() == "module" || cells[0].trim().starts_with("---") {
            continue;
        }
        assert!(
            cells.len() >= 3,
            "a row of the layer table has no `uses` cell: {line}"
        );
        rows.push(Row {
            modules: backticked(cells[0]),
            uses: backticked(cells[1]).into_iter().collect(),
        });
    }
    assert!(
        !rows.is_empty(),
        "the layer table under {HEADING:?} has no rows"
    );
    rows
}

/// Rust source with its comments, strings and character literals blanked
/// out (each string becomes `""`), so that only code is searched.
fn code_only(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (i == 0 || !ident(s[i - 1]) || (s[i - 1] == 'b' && (i < 2 || !ident(s[i - 2]))))
            && matches!(next, Some('"') | Some('#'))
            && {
                let mut j = i + 1;
                while s.get(j) == Some(&'#') {
                    j += 1;
                }
                s.get(j) == Some(&'"')
            }
        {
            // A raw string: r"..", r#".."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while s[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= s.len() {
                    break;
                }
                if s[j] == '"' && (0..hashes).all(|h| s.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items, and the names of the modules
/// declared test-only there (`#[cfg(test)] mod tests;`), whose files are
/// left out too.
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut test_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let b = item.as_bytes();
        let mut i = 0;
        // Further attributes of the same item.
        loop {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if b.get(i) == Some(&b'#') {
                i = past_closing(b, i, (b'[', b']'), false);
            } else {
                break;
            }
        }
        let start = i;
        i = past_closing(b, i, (b'{', b'}'), true);
        let words: Vec<&str> = item[start..i]
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
            .filter(|w| !w.is_empty())
            .collect();
        let declared = words.iter().position(|&w| w == "mod");
        if let Some(k) = declared
            && let Some(name) = words.get(k + 1)
            && name.ends_with(';')
        {
            test_mods.push(name.trim_end_matches(';').to_string());
        }
        rest = &item[i..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// Where the bracketed group that starts at or after `i` in `b` ends: just
/// past the `close` that matches its first `open`, or (when
/// `semicolon_ends`) past a `;` outside any group, whichever comes first;
/// the end of `b` if neither does.
fn past_closing(b: &[u8], mut i: usize, (open, close): (u8, u8), semicolon_ends: bool) -> usize {
    let mut depth = 0;
    while i < b.len() {
        match b[i] {
            b';' if semicolon_ends && depth == 0 => return i + 1,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The first names of a use tree that follows `crate::` (`a::b`, `{a, b::c}`).
fn tree_heads(tree: &str) -> Vec<String> {
    let tree = tree.trim_start();
    if let Some(inner) = tree.strip_prefix('{') {
        let mut heads = Vec::new();
        let mut depth = 0;
        let mut part = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    heads.push(std::mem::take(&mut part));
                    continue;
                }
                _ => {}
            }
            part.push(c);
        }
        heads.push(part);
        heads.iter().filter_map(|p| head(p.trim_start())).collect()
    } else {
        head(tree).into_iter().collect()
    }
}

/// The identifier that starts `s`.
fn head(s: &str) -> Option<String> {
    let name: String = s
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The crate's top-level modules that `code`, the code of the module at
/// `path` (its path from the crate's root), names: through `crate::` paths,
/// and `super::` paths that climb to the root. `Error` stands for `error`.
fn used_modules(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let before_ok = |at: usize| {
        at == 0 || {
            let c = code[..at].chars().next_back().unwrap();
            !(c.is_alphanumeric() || c == '_')
        }
    };
    for (at, _) in code.match_indices("crate::") {
        if before_ok(at) || code[..at].ends_with('$') {
            used.extend(tree_heads(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if !before_ok(at) || code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs >= path.len() {
            used.extend(tree_heads(rest));
        }
    }
    used.into_iter()
        .map(|m| if m == "Error" { "error".to_string() } else { m })
        .collect()
}

/// The library's source files (not the binary's: `main.rs`, `cli/`), each
/// with its module path from the crate's root.
fn library_files(src: &Path) -> Vec<(PathBuf, Vec<String>)> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, files);
            } else if p.extension().is_some_and(|e| e == "rs") {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let file = parts.pop().unwrap();
            let stem = file.trim_end_matches(".rs");
            if parts.is_empty() && (stem == "main" || stem == "lib")
                || parts.first().is_some_and(|d| d == "cli")
            {
                return None;
            }
            if stem != "mod" {
                parts.push(stem.to_string());
            }
            Some((p, parts))
        })
        .collect()
}

/// Each top-level module's uses of the others, outside tests; and the
/// modules `lib.rs` declares outside tests.
fn uses_by_module(src: &Path) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let lib = code_only(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let (lib, _) = without_tests(&lib);
    let declared: BTreeSet<String> = lib
        .split(';')
        .filter_map(|item| {
            let words: Vec<&str> = item.split_whitespace().collect();
            let k = words.iter().position(|&w| w == "mod")?;
            words.get(k + 1).map(|w| w.to_string())
        })
        .collect();
    let files = library_files(src);
    let mut code = Vec::new();
    let mut test_only: Vec<Vec<String>> = Vec::new();
    for (file, path) in &files {
        let (c, test_mods) = without_tests(&code_only(&fs::read_to_string(file).unwrap()));
        for name in test_mods {
            let mut child = path.clone();
            child.push(name);
            test_only.push(child);
        }
        code.push(c);
    }
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((_, path), c) in files.iter().zip(&code) {
        if !declared.contains(&path[0]) || test_only.iter().any(|t| path.starts_with(t)) {
            continue;
        }
        let mut found = used_modules(c, path);
        found.remove(&path[0]);
        uses.entry(path[0].clone()).or_default().extend(found);
    }
    (uses, declared)
}

/// What is wrong with the crate's uses against the table: empty when they
/// agree.
fn disagreements(
    rows: &[Row],
    uses: &BTreeMap<String, BTreeSet<String>>,
    declared: &BTreeSet<String>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut level = BTreeMap::new();
    for (k, row) in rows.iter().enumerate() {
        for m in &row.modules {
            if level.insert(m.clone(), k).is_some() {
                wrong.push(format!("`{m}` has two rows"));
            }
        }
    }
    for m in declared {
        if !level.contains_key(m) {
            wrong.push(format!("`{m}` is a module of the crate and has no row"));
        }
    }
    for (k, row) in rows.iter().enumerate() {
        for u in &row.uses {
            match level.get(u) {
                None => wrong.push(format!(
                    "row {:?} uses `{u}`, which has no row",
                    row.modules
                )),
                Some(&l) if l >= k => wrong.push(format!(
                    "row {:?} uses `{u}`, which is not above it",
                    row.modules
                )),
                Some(_) => {}
            }
        }
        let mut used_by_row = BTreeSet::new();
        for m in &row.modules {
            let found = uses.get(m).cloned().unwrap_or_default();
            for u in found.difference(&row.uses) {
                wrong.push(format!("`{m}` uses `{u}`, which its row does not list"));
            }
            used_by_row.extend(found);
        }
        for u in row.uses.difference(&used_by_row) {
            wrong.push(format!(
                "row {:?} lists `{u}`, which none of it uses",
                row.modules
            ));
        }
    }
    wrong
}

#[test]
fn every_module_uses_what_the_architecture_table_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("../docs/architecture.md")).unwrap();
    let rows = table(&doc);
    let (uses, declared) = uses_by_module(&root.join("src"));
    let wrong = disagreements(&rows, &uses, &declared);
    assert!(
        wrong.is_empty(),
        "the library's layers and docs/architecture.md's table disagree (fix the code, or the table with the code):\n  {}",
        wrong.join("\n  ")
    );
}

/// The set of these names.
fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn an_upward_use_is_found_and_tests_and_comments_are_not() {
    let code = code_only(
        r#"
        //! See crate::print for the words.
        use crate::{units, analysis::{Flow, summary}};
        use super::super::replay::ReplayState;
        fn f() -> crate::Error { let s = "crate::print"; let c = '"'; todo!() }
        #[cfg(test)]
        mod tests { use crate::print::text; }
        #[cfg(test)]
        mod more;
        "#,
    );
    let (code, test_mods) = without_tests(&code);
    assert_eq!(test_mods, ["more"]);
    let path = ["simulate".to_string(), "kv".to_string()];
    let found = used_modules(&code, &path);
    assert_eq!(found, names(&["analysis", "error", "replay", "units"]));

    let rows = table(&format!(
        "{HEADING}\n\n| module | uses | holds |\n|---|---|---|\n| `units` | | u |\n| `replay` | `units` | r |\n| `print` | `replay` | p |\n"
    ));
    let uses = BTreeMap::from([
        ("replay".to_string(), names(&["print"])),
        ("print".to_string(), names(&["replay"])),
    ]);
    let declared = names(&["units", "replay", "print", "extra"]);
    let wrong = disagreements(&rows, &uses, &declared);
    assert_eq!(
        wrong,
        [
            "`extra` is a module of the crate and has no row",
            "`replay` uses `print`, which its row does not list",
            "row [\"replay\"] lists `units`, which none of it uses",
        ]
    );
}
