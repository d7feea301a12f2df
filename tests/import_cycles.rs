//! No crate of the workspace has an import cycle between its modules (issue 21).
//!
//! A module is a file (`x.rs`, or a directory's `mod.rs`; the crate root is `lib.rs` or
//! `main.rs`). One module uses another when its code names a path into it: `use crate::…`,
//! `crate::x::…`, `super::…`, `self::…`, or a child module or an imported name written bare.
//! A parent declaring its children (`mod x;`) is a declaration, not a use; a child naming its
//! parent's items is a use. A name a module re-exports or imports (`pub use a::B`) counts as
//! the module that defines it, so a child naming `super::B` uses `a`, not its parent. Paths in
//! comments and string literals are not code. Modules written inline in a file (`mod tests
//! { … }`) belong to that file, so their `super::` is the file itself.
//!
//! The checker reads the source with a small lexer of its own (std only): it does not need
//! the compiler's resolution, only the paths a file names, at file granularity. A method
//! called on a type whose `impl` block is in another file names no path, so it is no import.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// A module's path inside its crate (`["migrate", "phases"]`; the root is empty).
type ModPath = Vec<String>;

/// What the checker needs of Rust's tokens.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

/// The tokens of a Rust source file with their line numbers, comments, strings, character
/// literals and lifetimes left out.
fn lex(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut at = 0;
    let peek = |index: usize| chars.get(index).copied().unwrap_or('\0');
    while at < chars.len() {
        let current = chars[at];
        if current == '\n' {
            line += 1;
            at += 1;
        } else if current.is_whitespace() {
            at += 1;
        } else if current == '/' && peek(at + 1) == '/' {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if current == '/' && peek(at + 1) == '*' {
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && peek(at + 1) == '*' {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && peek(at + 1) == '/' {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[at] == '\n');
                    at += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, at) {
            // r"…", r#"…"#, br"…": no escapes; ends at a quote followed by as many hashes.
            at = chars[at..]
                .iter()
                .position(|&quote| quote == '"')
                .map_or(chars.len(), |offset| at + offset + 1);
            while at < chars.len() {
                let closes =
                    chars[at] == '"' && (1..=hashes).all(|offset| peek(at + offset) == '#');
                line += usize::from(chars[at] == '\n');
                at += 1;
                if closes {
                    at += hashes;
                    break;
                }
            }
        } else if current == '"' || (current == 'b' && peek(at + 1) == '"') {
            at += if current == 'b' { 2 } else { 1 };
            while at < chars.len() && chars[at] != '"' {
                if chars[at] == '\\' {
                    at += 1;
                }
                line += usize::from(peek(at) == '\n');
                at += 1;
            }
            at += 1;
        } else if current == '\'' || (current == 'b' && peek(at + 1) == '\'') {
            let start = if current == 'b' { at + 1 } else { at };
            if peek(start + 1) == '\\' {
                at = start + 2;
                while at < chars.len() && chars[at] != '\'' {
                    at += 1;
                }
                at += 1;
            } else if peek(start + 2) == '\'' {
                at = start + 3;
            } else {
                // A lifetime or a label: its name is lexed as an identifier, harmlessly.
                at = start + 1;
            }
        } else if current.is_alphabetic() || current == '_' {
            if current == 'r' && peek(at + 1) == '#' {
                at += 2;
            }
            let start = at;
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
            tokens.push((Token::Ident(chars[start..at].iter().collect()), line));
        } else if current.is_ascii_digit() {
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
        } else {
            let token = match current {
                ':' if peek(at + 1) == ':' => {
                    at += 1;
                    Token::PathSep
                }
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                ';' => Token::Semi,
                '*' => Token::Star,
                other => Token::Other(other),
            };
            tokens.push((token, line));
            at += 1;
        }
    }
    tokens
}

/// How many `#` a raw string starting at `at` (a token's start) has, if one starts there.
fn raw_string_start(chars: &[char], at: usize) -> Option<usize> {
    let mut index = at;
    if chars.get(index) == Some(&'b') {
        index += 1;
    }
    if chars.get(index) != Some(&'r') {
        return None;
    }
    index += 1;
    let hashes = chars[index..]
        .iter()
        .take_while(|&&hash| hash == '#')
        .count();
    (chars.get(index + hashes) == Some(&'"')).then_some(hashes)
}

/// A path a file names, as written, in the module (file plus inline modules) it is written in.
#[derive(Debug, Clone)]
struct Named {
    scope: ModPath,
    segments: Vec<String>,
    line: usize,
}

/// What one file declares and names.
#[derive(Debug, Default)]
struct Parsed {
    /// `mod x;` declarations: the scope they are in and the child's name.
    declared: Vec<(ModPath, String)>,
    /// Inline modules (`mod tests { … }`), by their path relative to the file.
    inline: Vec<ModPath>,
    /// Names brought in by `use` (or re-exported by `pub use`): scope, name, path as written.
    imports: Vec<(ModPath, String, Vec<String>)>,
    /// Every path the file names, `use` trees expanded.
    named: Vec<Named>,
}

fn ident(tokens: &[(Token, usize)], at: usize) -> Option<&str> {
    match tokens.get(at) {
        Some((Token::Ident(name), _)) => Some(name),
        _ => None,
    }
}

fn parse(source: &str) -> Parsed {
    let tokens = lex(source);
    let mut parsed = Parsed::default();
    // One entry per open brace: the inline module it opens, if it opens one.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let scope: ModPath = braces.iter().flatten().cloned().collect();
        let (token, line) = &tokens[at];
        let after_sep = at > 0 && tokens[at - 1].0 == Token::PathSep;
        match token {
            Token::Open => braces.push(None),
            Token::Close => {
                braces.pop();
            }
            Token::Ident(word) if word == "mod" && !after_sep => {
                if let Some(name) = ident(&tokens, at + 1) {
                    match tokens.get(at + 2).map(|(token, _)| token) {
                        Some(Token::Semi) => parsed.declared.push((scope, name.to_string())),
                        Some(Token::Open) => {
                            let mut inline = scope.clone();
                            inline.push(name.to_string());
                            parsed.inline.push(inline);
                            braces.push(Some(name.to_string()));
                            at += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Token::Ident(word)
                if word == "use"
                    && !after_sep
                    && tokens.get(at + 1).map(|(token, _)| token) != Some(&Token::Other('<')) =>
            {
                let mut trees = Vec::new();
                at = use_tree(&tokens, at + 1, Vec::new(), &mut trees);
                for (segments, alias) in trees {
                    if let Some(name) = alias {
                        parsed.imports.push((scope.clone(), name, segments.clone()));
                    }
                    parsed.named.push(Named {
                        scope: scope.clone(),
                        segments,
                        line: *line,
                    });
                }
                continue;
            }
            Token::Ident(first)
                if !after_sep
                    && tokens.get(at + 1).map(|(token, _)| token) == Some(&Token::PathSep) =>
            {
                let mut segments = vec![first.clone()];
                let mut next = at + 1;
                while tokens.get(next).map(|(token, _)| token) == Some(&Token::PathSep) {
                    match ident(&tokens, next + 1) {
                        Some(name) => segments.push(name.to_string()),
                        None => break,
                    }
                    next += 2;
                }
                parsed.named.push(Named {
                    scope,
                    segments,
                    line: *line,
                });
                at = next;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    parsed
}

/// Expands the `use` tree starting at `at` under `prefix` into its paths, each with the name
/// it brings into scope (none for a glob); returns the index after the tree (after its `;`).
fn use_tree(
    tokens: &[(Token, usize)],
    mut at: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    if tokens.get(at).map(|(token, _)| token) == Some(&Token::PathSep) {
        // `use ::name`: always another crate.
        prefix.push("::".to_string());
        at += 1;
    }
    loop {
        match tokens.get(at).map(|(token, _)| token) {
            Some(Token::Ident(name)) => {
                prefix.push(name.clone());
                at += 1;
                if tokens.get(at).map(|(token, _)| token) == Some(&Token::PathSep) {
                    at += 1;
                    continue;
                }
                let mut alias = prefix.last().cloned();
                if ident(tokens, at) == Some("as") {
                    alias = ident(tokens, at + 1).map(str::to_string);
                    at += 2;
                }
                if prefix.last().map(String::as_str) == Some("self") {
                    prefix.pop();
                    alias = prefix
                        .last()
                        .cloned()
                        .filter(|_| alias.as_deref() == Some("self"));
                }
                out.push((prefix, alias.filter(|name| name != "_")));
                break;
            }
            Some(Token::Star) => {
                out.push((prefix, None));
                at += 1;
                break;
            }
            Some(Token::Open) => {
                at += 1;
                while let Some((token, _)) = tokens.get(at) {
                    match token {
                        Token::Close => {
                            at += 1;
                            break;
                        }
                        Token::Comma => at += 1,
                        _ => at = use_tree(tokens, at, prefix.clone(), out),
                    }
                }
                break;
            }
            _ => break,
        }
    }
    if tokens.get(at).map(|(token, _)| token) == Some(&Token::Semi) {
        at += 1;
    }
    at
}

/// A crate's modules and the uses between them.
struct Graph {
    /// Each module's file, relative to the crate's source directory.
    files: BTreeMap<ModPath, String>,
    /// Uses between files: from, to, and the first path that makes it (line, path).
    edges: BTreeMap<(String, String), (usize, String)>,
}

/// Reads a crate from `sources` (file name relative to its source directory → text),
/// following `mod` declarations from `root` (`lib.rs` or `main.rs`).
fn graph(sources: &BTreeMap<String, String>, root: &str) -> Result<Graph, String> {
    let mut files: BTreeMap<ModPath, String> = BTreeMap::new();
    let mut parsed: BTreeMap<ModPath, Parsed> = BTreeMap::new();
    let mut queue = VecDeque::from([(ModPath::new(), root.to_string())]);
    while let Some((path, file)) = queue.pop_front() {
        let source = sources
            .get(&file)
            .ok_or_else(|| format!("module {} has no file {file}", path.join("::")))?;
        let this = parse(source);
        let dir = match file.rsplit_once('/') {
            Some((dir, "mod.rs" | "lib.rs" | "main.rs")) => format!("{dir}/"),
            None if matches!(file.as_str(), "mod.rs" | "lib.rs" | "main.rs") => String::new(),
            _ => format!("{}/", file.trim_end_matches(".rs")),
        };
        for (scope, name) in &this.declared {
            let mut child = path.clone();
            child.extend(scope.iter().cloned());
            child.push(name.clone());
            let base = format!(
                "{dir}{}{name}",
                scope
                    .iter()
                    .map(|inline| format!("{inline}/"))
                    .collect::<String>()
            );
            let candidates = [format!("{base}.rs"), format!("{base}/mod.rs")];
            let found = candidates.iter().find(|name| sources.contains_key(*name));
            let found = found
                .ok_or_else(|| format!("{file}: `mod {name};` has no file {}", candidates[0]))?;
            queue.push_back((child, found.clone()));
        }
        files.insert(path.clone(), file);
        parsed.insert(path, this);
    }
    // Every module, file or inline, with the file it is in; and the names each one imports.
    let mut scopes: BTreeMap<ModPath, String> = files.clone();
    let mut imports: BTreeMap<(ModPath, String), ModPath> = BTreeMap::new();
    let mut children: BTreeSet<(ModPath, String)> = BTreeSet::new();
    for (path, this) in &parsed {
        let at = |scope: &ModPath| path.iter().chain(scope).cloned().collect::<ModPath>();
        for inline in &this.inline {
            scopes.insert(at(inline), files[path].clone());
            let (name, parent) = inline.split_last().expect("an inline module has a name");
            children.insert((at(&parent.to_vec()), name.clone()));
        }
        for (scope, name) in &this.declared {
            children.insert((at(scope), name.clone()));
        }
    }
    let absolute =
        |scope: &ModPath, segments: &[String], imports: &BTreeMap<(ModPath, String), ModPath>| {
            let first = segments.first()?.as_str();
            let mut resolved = match first {
                "crate" => ModPath::new(),
                "self" => scope.clone(),
                "super" => {
                    let ups = segments
                        .iter()
                        .take_while(|segment| *segment == "super")
                        .count();
                    let kept = scope.len().checked_sub(ups)?;
                    let mut base = scope[..kept].to_vec();
                    base.extend(segments[ups..].iter().cloned());
                    return Some(base);
                }
                _ if children.contains(&(scope.clone(), first.to_string())) => {
                    let mut base = scope.clone();
                    base.push(first.to_string());
                    base
                }
                _ => imports.get(&(scope.clone(), first.to_string()))?.clone(),
            };
            resolved.extend(segments[1..].iter().cloned());
            Some(resolved)
        };
    // Imports first (in order, so an import may name an earlier one), then what they resolve to.
    for (path, this) in &parsed {
        for (scope, name, segments) in &this.imports {
            let scope: ModPath = path.iter().chain(scope).cloned().collect();
            if let Some(target) = absolute(&scope, segments, &imports) {
                imports.insert((scope, name.clone()), target);
            }
        }
    }
    let defining_file = |mut target: ModPath| -> Option<String> {
        for _ in 0..16 {
            let module = (0..=target.len())
                .rev()
                .find(|len| scopes.contains_key(&target[..*len]))?;
            let reexported = target
                .get(module)
                .and_then(|name| imports.get(&(target[..module].to_vec(), name.clone())));
            match reexported {
                Some(through) if *through != target[..=module] => {
                    let mut next = through.clone();
                    next.extend(target[module + 1..].iter().cloned());
                    target = next;
                }
                _ => return Some(scopes[&target[..module]].clone()),
            }
        }
        None
    };
    let mut edges = BTreeMap::new();
    for (path, this) in &parsed {
        let from = &files[path];
        for named in &this.named {
            let scope: ModPath = path.iter().chain(&named.scope).cloned().collect();
            let Some(target) = absolute(&scope, &named.segments, &imports) else {
                continue;
            };
            let Some(to) = defining_file(target) else {
                continue;
            };
            if to != *from {
                edges
                    .entry((from.clone(), to))
                    .or_insert((named.line, named.segments.join("::")));
            }
        }
    }
    Ok(Graph { files, edges })
}

/// Every import cycle of a graph, one message per strongly connected set of files: its files,
/// the uses among them (with the line and path of each), and a shortest cycle through each.
fn cycles(graph: &Graph) -> Vec<String> {
    let nodes: Vec<&String> = graph.files.values().collect();
    let index: BTreeMap<&String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(position, name)| (*name, position))
        .collect();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (from, to) in graph.edges.keys() {
        next[index[from]].push(index[to]);
    }
    // Strongly connected sets: the files each file reaches and is reached back from.
    let reach = |start: usize| {
        let mut seen = BTreeSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            for &to in &next[node] {
                if seen.insert(to) {
                    queue.push_back(to);
                }
            }
        }
        seen
    };
    let reaches: Vec<BTreeSet<usize>> = (0..nodes.len()).map(reach).collect();
    let mut done = BTreeSet::new();
    let mut reports = Vec::new();
    for start in 0..nodes.len() {
        if done.contains(&start) {
            continue;
        }
        let set: BTreeSet<usize> = reaches[start]
            .iter()
            .copied()
            .filter(|&other| reaches[other].contains(&start))
            .collect();
        done.extend(set.iter().copied());
        if set.len() < 2 {
            continue;
        }
        let mut names: Vec<&str> = set.iter().map(|&node| nodes[node].as_str()).collect();
        names.sort();
        let mut report = format!("import cycle among {}: {}\n", names.len(), names.join(", "));
        for ((from, to), (line, path)) in &graph.edges {
            if set.contains(&index[from]) && set.contains(&index[to]) {
                report += &format!("  {from} -> {to}  ({from}:{line} names `{path}`)\n");
            }
        }
        let mut shown = BTreeSet::new();
        for &node in &set {
            let cycle = shortest_cycle(&next, node);
            let mut key = cycle.clone();
            key.sort();
            if shown.insert(key) {
                let mut files: Vec<&str> = cycle.iter().map(|&node| nodes[node].as_str()).collect();
                files.push(nodes[node].as_str());
                report += &format!("  cycle: {}\n", files.join(" -> "));
            }
        }
        reports.push(report);
    }
    reports
}

/// The shortest path from `start` back to itself, `start` first.
fn shortest_cycle(next: &[Vec<usize>], start: usize) -> Vec<usize> {
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &to in &next[node] {
            if to == start {
                let mut path = vec![node];
                while let Some(&before) = came_from.get(path.last().expect("not empty")) {
                    path.push(before);
                }
                path.reverse();
                return path;
            }
            if let std::collections::btree_map::Entry::Vacant(slot) = came_from.entry(to) {
                slot.insert(node);
                queue.push_back(to);
            }
        }
    }
    vec![start]
}

/// The `.rs` files under `dir`, by their path relative to it, leaving out `skip` (relative).
fn read_crate(dir: &Path, skip: &[&str]) -> BTreeMap<String, String> {
    let mut sources = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)
            .unwrap_or_else(|error| panic!("{}: {error}", current.display()))
        {
            let path = entry.expect("a directory entry").path();
            let relative = path
                .strip_prefix(dir)
                .expect("under dir")
                .to_string_lossy()
                .replace('\\', "/");
            if skip.contains(&relative.as_str()) {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else if relative.ends_with(".rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                sources.insert(relative, text);
            }
        }
    }
    sources
}

fn workspace_crate(dir: &str, root: &str, skip: &[&str]) -> (BTreeMap<String, String>, Graph) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let sources = read_crate(&path, skip);
    let graph = graph(&sources, root).unwrap_or_else(|error| panic!("{dir}: {error}"));
    (sources, graph)
}

#[test]
fn no_crate_has_an_import_cycle() {
    let crates = [
        // src/bin/*.rs are crate roots of their own (the module binaries), one file each.
        ("src", "lib.rs", &["bin"][..]),
        ("pve/src", "lib.rs", &[][..]),
        ("sim/src", "main.rs", &[][..]),
    ];
    let mut found = Vec::new();
    for (dir, root, skip) in crates {
        let (sources, graph) = workspace_crate(dir, root, skip);
        // The checker saw every file of the crate, so a cycle cannot hide in one it missed.
        let seen: BTreeSet<&String> = graph.files.values().collect();
        let unseen: Vec<&String> = sources.keys().filter(|name| !seen.contains(name)).collect();
        assert!(
            unseen.is_empty(),
            "{dir}: files no `mod` declares: {unseen:?}"
        );
        assert!(
            !graph.edges.is_empty(),
            "{dir}: no uses between modules were found"
        );
        found.extend(
            cycles(&graph)
                .into_iter()
                .map(|report| format!("{dir}: {report}")),
        );
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

fn in_memory(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(name, text)| (name.to_string(), text.to_string()))
        .collect()
}

#[test]
fn a_two_file_cycle_is_found_with_its_files() {
    let sources = in_memory(&[
        ("lib.rs", "mod alpha;\nmod beta;\n"),
        (
            "alpha.rs",
            "use crate::beta::Beta;\npub struct Alpha(Beta);\n",
        ),
        (
            "beta.rs",
            "pub struct Beta;\npub fn make() -> crate::alpha::Alpha { crate::alpha::Alpha(Beta) }\n",
        ),
    ]);
    let graph = graph(&sources, "lib.rs").expect("the example reads");
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("import cycle among 2: alpha.rs, beta.rs"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("alpha.rs -> beta.rs  (alpha.rs:1 names `crate::beta::Beta`)"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("beta.rs -> alpha.rs  (beta.rs:2 names `crate::alpha::Alpha`)"),
        "{}",
        found[0]
    );
}

#[test]
fn a_declaration_is_not_a_use_but_a_child_naming_its_parent_is() {
    let declared_only = in_memory(&[
        ("lib.rs", "mod part;\n"),
        ("part/mod.rs", "mod child;\npub struct Shared;\n"),
        ("part/child.rs", "use super::Shared;\n"),
    ]);
    let graph = graph(&declared_only, "lib.rs").expect("the example reads");
    assert!(
        graph
            .edges
            .contains_key(&("part/child.rs".into(), "part/mod.rs".into()))
    );
    assert!(cycles(&graph).is_empty(), "{:?}", cycles(&graph));

    let both_ways = in_memory(&[
        ("lib.rs", "mod part;\n"),
        (
            "part/mod.rs",
            "mod child;\npub struct Shared;\nfn run() { child::go() }\n",
        ),
        ("part/child.rs", "pub fn go() { let _ = super::Shared; }\n"),
    ]);
    let found = cycles(&graph_of(&both_ways));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("part/child.rs, part/mod.rs"),
        "{}",
        found[0]
    );
}

fn graph_of(sources: &BTreeMap<String, String>) -> Graph {
    graph(sources, "lib.rs").expect("the example reads")
}

#[test]
fn a_re_export_counts_as_the_module_that_defines_it() {
    // `part` re-exports `Item` from `defs`; `user` naming `super::Item` uses `defs`.
    let sources = in_memory(&[
        ("lib.rs", "mod part;\n"),
        (
            "part/mod.rs",
            "mod defs;\nmod user;\npub use defs::Item;\npub use user::run;\n",
        ),
        ("part/defs.rs", "pub struct Item;\n"),
        (
            "part/user.rs",
            "use super::Item;\npub fn run() -> Item { Item }\n",
        ),
    ]);
    let graph = graph_of(&sources);
    assert!(
        graph
            .edges
            .contains_key(&("part/user.rs".into(), "part/defs.rs".into()))
    );
    assert!(
        !graph
            .edges
            .contains_key(&("part/user.rs".into(), "part/mod.rs".into()))
    );
    assert!(cycles(&graph).is_empty(), "{:?}", cycles(&graph));
}

#[test]
fn comments_strings_and_a_files_own_tests_are_not_uses() {
    let sources = in_memory(&[
        ("lib.rs", "mod alpha;\nmod beta;\n"),
        ("alpha.rs", "use crate::beta::Beta;\n"),
        (
            "beta.rs",
            "//! Used by [`crate::alpha`].\n/* crate::alpha::x */ pub struct Beta;\n\
             const NOTE: &str = \"crate::alpha::x\";\nconst RAW: &str = r#\"crate::alpha\"#;\n\
             const QUOTE: char = '\"';\nfn f<'a>(x: &'a str) -> &'a str { x }\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::f(\"\"); }\n}\n",
        ),
    ]);
    let graph = graph_of(&sources);
    assert_eq!(graph.edges.len(), 1, "{:?}", graph.edges);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn grouped_renamed_and_bare_imports_are_followed() {
    let sources = in_memory(&[
        (
            "main.rs",
            "mod alpha;\nmod beta;\nmod gamma;\nfn main() {}\n",
        ),
        (
            "alpha.rs",
            "use crate::{beta::{self as other}, gamma};\nfn f() { other::g(); }\n",
        ),
        ("beta.rs", "pub fn g() {}\n"),
        (
            "gamma.rs",
            "use crate::alpha as first;\nfn h() { first::f(); }\n",
        ),
    ]);
    let graph = graph(&sources, "main.rs").expect("the example reads");
    let edges: Vec<(&str, &str)> = graph
        .edges
        .keys()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect();
    assert_eq!(
        edges,
        [
            ("alpha.rs", "beta.rs"),
            ("alpha.rs", "gamma.rs"),
            ("gamma.rs", "alpha.rs")
        ]
    );
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("cycle: alpha.rs -> gamma.rs -> alpha.rs"),
        "{}",
        found[0]
    );
}
