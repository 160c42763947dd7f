//! The graph of a crate's top-level modules, and of the children of each module directory in
//! it (`dir/x.rs` or `dir/x/`), read from its source text, and the circles in it. What follows
//! is said of the crate root; for a directory, read `crate::dir::` for `crate::`, `super::`
//! from a child (or `super::super::` from its child) for `super::` that climbs to the root, and
//! `mod.rs` (or `dir.rs`) for the root, a node when it holds code.
//!
//! An arrow goes from top-level module A to top-level module B when code in A names
//! `crate::B…`, or an item the crate root imports from B (`crate::Item` where the root has
//! `pub use b::Item`); `super::` that climbs to the root counts as `crate::`, and `$crate::` in
//! a macro counts where the macro is written. The crate root is a module of its own only when
//! it holds more than `mod` declarations, `use` declarations, attributes and docs; then its code
//! draws arrows too (`b::f()`, or an item it imported from `b`). Comments, string and character
//! literals, and items under `#[cfg(test)]` are left out before anything is read, so a doc link
//! or a test helper draws no arrow.
//!
//! A scan of tokens is enough here: the rules above need paths, braces and `;`, not a full
//! parse. What it does not see: a macro used by its textual scope (no path); a
//! `#[macro_export]` macro named as `crate::name!` counts as the root's; `#[cfg(...)]`
//! spellings other than `#[cfg(test)]`; `#[path]` attributes; `super::` inside an inline
//! module is counted from the file; a directory's `mod.rs` importing through a
//! `use crate::{dir::…}` group.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One source file: where it is (for messages) and its text.
#[derive(Clone)]
pub(super) struct SourceFile {
    pub(super) label: String,
    pub(super) text: String,
}

/// A module with children as text: the crate itself, or a directory module inside it. Its
/// own file (the crate root, `dir/mod.rs` or `dir.rs`) and each child's files (its own file and
/// those of the modules declared under it).
pub(super) struct CrateSource {
    /// The module's path from the crate root: empty for the crate, `["gateway"]` for
    /// `src/gateway/`.
    pub(super) path: Vec<String>,
    pub(super) root: SourceFile,
    /// Where its children's files live, labelled like the files (`src`, `src/gateway`).
    pub(super) children_dir: String,
    pub(super) modules: BTreeMap<String, Vec<SourceFile>>,
}

/// The node of the crate root in a graph.
pub(super) const ROOT: &str = "crate root";

/// Arrows between top-level modules, each with the places that draw it (`file:line path`).
#[derive(Debug, Default)]
pub(super) struct ModuleGraph {
    pub(super) arrows: BTreeMap<(String, String), BTreeSet<String>>,
}

impl CrateSource {
    /// Reads the crate whose root file is `root` (`src/lib.rs` or `src/main.rs`): the crate
    /// first, then every module in it that has children of its own (`#[cfg(test)]` ones left
    /// out).
    pub(super) fn read(root: &Path) -> Vec<CrateSource> {
        let source_dir = root.parent().expect("a root file has a directory");
        let mut sources = Vec::new();
        read_tree(root, source_dir, Vec::new(), &mut sources);
        sources.reverse();
        sources
    }

    /// The name of this module's own node: the crate root, or its file's name (`mod.rs`).
    pub(super) fn root_node(&self) -> String {
        if self.path.is_empty() {
            return ROOT.to_string();
        }
        let label = Path::new(&self.root.label);
        label
            .file_name()
            .map_or(ROOT.to_string(), |name| name.to_string_lossy().to_string())
    }

    /// Where this module is, for messages: the crate, or `gateway` inside it.
    pub(super) fn name(&self) -> String {
        self.path.join("::")
    }

    /// `name` in this module, as a path from the crate root: `crate::gateway::name`.
    fn full_path(&self, name: &str) -> String {
        let mut path = vec!["crate"];
        path.extend(self.path.iter().map(String::as_str));
        path.push(name);
        path.join("::")
    }

    /// The arrows between this module's children (and its own file, when that holds code).
    pub(super) fn graph(&self) -> ModuleGraph {
        let root_tokens = tokens(&self.root.text);
        let imports = root_imports(&root_tokens, &self.modules, &self.path);
        let root_node = self.root_node();
        let resolver = Resolver {
            modules: &self.modules,
            imports: &imports,
            root_node: &root_node,
        };
        let mut graph = ModuleGraph::default();
        for (module, files) in &self.modules {
            for file in files {
                let depth = module_depth(&file.label, &self.children_dir);
                for (line, name) in module_path_heads(&tokens(&file.text), depth, &self.path) {
                    if let Some(target) = resolver.resolve(&name) {
                        let shown = self.full_path(&name);
                        graph.add(module, target, format!("{}:{line} {shown}", file.label));
                    }
                }
            }
        }
        if let Some(body) = root_body(&root_tokens) {
            for (line, name, target) in resolver.root_body_arrows(&body, &self.path) {
                graph.add(
                    &root_node,
                    &target,
                    format!("{}:{line} {name}", self.root.label),
                );
            }
        }
        graph
    }
}

/// Reads the module whose file is `path` and whose children live in `children_dir`, then
/// the modules it declares in turn; pushes a source for each module that has children, and
/// returns this module's files.
fn read_tree(
    path: &Path,
    children_dir: &Path,
    module_path: Vec<String>,
    sources: &mut Vec<CrateSource>,
) -> Vec<SourceFile> {
    let root = read_file(path);
    let mut files = vec![root.clone()];
    let mut modules = BTreeMap::new();
    for name in declared_modules(&tokens(&root.text)) {
        let (child_path, child_dir) = match children_dir.join(format!("{name}.rs")) {
            path if path.is_file() => (path, children_dir.join(&name)),
            _ => (
                children_dir.join(&name).join("mod.rs"),
                children_dir.join(&name),
            ),
        };
        let mut child_module_path = module_path.clone();
        child_module_path.push(name.clone());
        let child_files = read_tree(&child_path, &child_dir, child_module_path, sources);
        files.extend(child_files.iter().cloned());
        modules.insert(name, child_files);
    }
    if !modules.is_empty() {
        sources.push(CrateSource {
            path: module_path,
            root,
            children_dir: label(children_dir),
            modules,
        });
    }
    files
}

/// A path as a label: from the workspace root.
fn label(path: &Path) -> String {
    let workspace = super::workspace_root();
    path.strip_prefix(&workspace)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A file, labelled by its path from the workspace root.
fn read_file(path: &Path) -> SourceFile {
    SourceFile {
        label: label(path),
        text: std::fs::read_to_string(path).expect("a source file is readable"),
    }
}

/// How many `super::` climb from this file to the module whose children live in
/// `children_dir`: 1 for `dir/a.rs` and `dir/a/mod.rs`, 2 for `dir/a/b.rs`.
fn module_depth(file: &str, children_dir: &str) -> usize {
    let relative = Path::new(file)
        .strip_prefix(children_dir)
        .unwrap_or(Path::new(file));
    let components = relative.components().count();
    if relative.file_name().is_some_and(|name| name == "mod.rs") {
        components - 1
    } else {
        components
    }
}

impl ModuleGraph {
    fn add(&mut self, from: &str, to: &str, evidence: String) {
        if from != to {
            let key = (from.to_string(), to.to_string());
            self.arrows.entry(key).or_default().insert(evidence);
        }
    }

    fn targets(&self, from: &str) -> impl Iterator<Item = &str> {
        self.arrows
            .keys()
            .filter(move |(source, _)| source == from)
            .map(|(_, target)| target.as_str())
    }

    /// The groups of modules that reach each other (strongly connected, more than one module).
    pub(super) fn circles(&self) -> Vec<BTreeSet<String>> {
        let nodes: BTreeSet<&str> = self
            .arrows
            .keys()
            .flat_map(|(from, to)| [from.as_str(), to.as_str()])
            .collect();
        let mut circles: Vec<BTreeSet<String>> = Vec::new();
        for node in &nodes {
            if circles.iter().any(|circle| circle.contains(*node)) {
                continue;
            }
            let forward = self.reachable_from(node);
            let circle: BTreeSet<String> = forward
                .iter()
                .filter(|other| self.reachable_from(other).contains(*node))
                .map(|other| other.to_string())
                .collect();
            if circle.len() > 1 {
                circles.push(circle);
            }
        }
        circles
    }

    /// Every node reachable from `start`, `start` included.
    fn reachable_from<'a>(&'a self, start: &'a str) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::from([start]);
        let mut pending = vec![start];
        while let Some(node) = pending.pop() {
            for target in self.targets(node) {
                if seen.insert(target) {
                    pending.push(target);
                }
            }
        }
        seen
    }

    /// A circle as a message: its modules, then each arrow inside it and what draws it.
    pub(super) fn describe(&self, circle: &BTreeSet<String>) -> String {
        let names: Vec<&str> = circle.iter().map(String::as_str).collect();
        let mut text = format!("  circle: {}\n", names.join(", "));
        for ((from, to), evidence) in &self.arrows {
            if circle.contains(from) && circle.contains(to) {
                text.push_str(&format!("    {from} -> {to}\n"));
                for place in evidence {
                    text.push_str(&format!("      {place}\n"));
                }
            }
        }
        text
    }
}

/// Resolves a name in a module with children (the crate root, or a directory module) to the
/// node it belongs to.
struct Resolver<'a> {
    modules: &'a BTreeMap<String, Vec<SourceFile>>,
    imports: &'a BTreeMap<String, Origin>,
    root_node: &'a str,
}

/// Where a name the root imports comes from.
enum Origin {
    /// One of the module's own children.
    Module(String),
    /// Another crate or module: naming it through the root depends on that, not on the root.
    Outside,
}

impl Resolver<'_> {
    /// `crate::name`: a module, an item the root imports from a module (or from another
    /// crate: no node), or else an item of the root itself.
    fn resolve<'b>(&'b self, name: &'b str) -> Option<&'b str> {
        if self.modules.contains_key(name) {
            return Some(name);
        }
        match self.imports.get(name) {
            Some(Origin::Module(module)) => Some(module),
            Some(Origin::Outside) => None,
            None => Some(self.root_node),
        }
    }

    /// Arrows drawn by the root's own code: `module::…` paths and names it imported from a
    /// module.
    fn root_body_arrows(&self, body: &[Token], path: &[String]) -> Vec<(usize, String, String)> {
        let mut arrows = Vec::new();
        for (index, token) in body.iter().enumerate() {
            let Token::Ident(name, line) = token else {
                continue;
            };
            let after_path = index > 0 && body[index - 1] == Token::Colons;
            let rooted = after_path && names_this_module(&body[..index - 1], path);
            if after_path && !rooted {
                continue;
            }
            let followed_by_path = body.get(index + 1) == Some(&Token::Colons);
            if self.modules.contains_key(name) && followed_by_path {
                arrows.push((*line, format!("{name}::"), name.clone()));
            } else if let Some(Origin::Module(module)) = self.imports.get(name) {
                arrows.push((*line, name.clone(), module.clone()));
            }
        }
        arrows
    }
}

/// A token of Rust source as this scan needs it. Literals and comments are gone by now.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// An identifier, keyword or number, with its line.
    Ident(String, usize),
    /// `::`
    Colons,
    /// Any other punctuation character.
    Punct(char),
}

/// The tokens of `text`, without comments, literals and `#[cfg(test)]` items.
fn tokens(text: &str) -> Vec<Token> {
    without_test_items(tokenize(&code_only(text)))
}

/// `text` with comments and string and character literals blanked out (lines kept).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < chars.len() {
        let end = literal_or_comment_end(&chars, index);
        if end == index {
            out.push(chars[index]);
            index += 1;
        } else {
            let blanked = chars[index..end]
                .iter()
                .map(|&c| if c == '\n' { '\n' } else { ' ' });
            out.extend(blanked);
            index = end;
        }
    }
    out
}

/// Where the comment or literal starting at `start` ends, or `start` when none starts there.
fn literal_or_comment_end(chars: &[char], start: usize) -> usize {
    let at = |offset: usize| chars.get(start + offset).copied();
    let after_ident = start > 0 && (chars[start - 1].is_alphanumeric() || chars[start - 1] == '_');
    match (at(0), at(1)) {
        (Some('/'), Some('/')) => (start..chars.len())
            .find(|&index| chars[index] == '\n')
            .unwrap_or(chars.len()),
        (Some('/'), Some('*')) => block_comment_end(chars, start),
        (Some('"'), _) => quoted_end(chars, start + 1, '"'),
        (Some('\''), Some('\\')) => quoted_end(chars, start + 1, '\''),
        (Some('\''), Some(_)) if at(2) == Some('\'') => start + 3,
        (Some('r'), Some('#' | '"')) if !after_ident || chars[start - 1] == 'b' => {
            raw_string_end(chars, start + 1)
        }
        _ => start,
    }
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0;
    let mut index = start;
    while index + 1 < chars.len() {
        match (chars[index], chars[index + 1]) {
            ('/', '*') => {
                depth += 1;
                index += 2;
            }
            ('*', '/') => {
                depth -= 1;
                index += 2;
                if depth == 0 {
                    return index;
                }
            }
            _ => index += 1,
        }
    }
    chars.len()
}

/// The end of a literal whose body starts at `body` and which closes with `quote`.
fn quoted_end(chars: &[char], body: usize, quote: char) -> usize {
    let mut index = body;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 2,
            c if c == quote => return index + 1,
            _ => index += 1,
        }
    }
    chars.len()
}

/// The end of a raw string whose `#`s (or opening quote) start at `hashes`; `r#ident` (a raw
/// identifier) is not a string and ends at once.
fn raw_string_end(chars: &[char], hashes: usize) -> usize {
    let count = chars[hashes..].iter().take_while(|&&c| c == '#').count();
    if chars.get(hashes + count) != Some(&'"') {
        return hashes - 1;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', count))
        .collect();
    let body = hashes + count + 1;
    (body..chars.len())
        .find(|&index| chars[index..].starts_with(&closing))
        .map_or(chars.len(), |index| index + closing.len())
}

fn tokenize(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if c.is_alphanumeric() || c == '_' || (c == '$' && chars.get(index + 1) == Some(&'c')) {
            let end = (index + 1..chars.len())
                .find(|&end| !(chars[end].is_alphanumeric() || chars[end] == '_'))
                .unwrap_or(chars.len());
            let word: String = chars[index..end].iter().collect();
            tokens.push(Token::Ident(word.replace("$crate", "crate"), line));
            index = end;
            continue;
        }
        if c == ':' && chars.get(index + 1) == Some(&':') {
            tokens.push(Token::Colons);
            index += 2;
            continue;
        }
        if c == '\n' {
            line += 1;
        } else if c == '\'' {
            // A lifetime or label: its name follows as an identifier, harmless.
        } else if !c.is_whitespace() {
            tokens.push(Token::Punct(c));
        }
        index += 1;
    }
    tokens
}

fn is_ident(token: Option<&Token>, word: &str) -> bool {
    matches!(token, Some(Token::Ident(name, _)) if name == word)
}

/// The index just past the bracketed group opening at `open`, or past the end.
fn group_end(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return index + 1;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The index just past the item starting at `start`: its `;`, or its block (and a `;` after
/// it), or the end of the block around it. A `{` after `::` is a use group, not a block.
fn item_end(tokens: &[Token], start: usize) -> usize {
    let mut index = start;
    while index < tokens.len() {
        match tokens[index] {
            Token::Punct(';') => return index + 1,
            Token::Punct('}' | ')' | ']') => return index,
            Token::Punct('{') if index == 0 || tokens[index - 1] != Token::Colons => {
                let end = group_end(tokens, index);
                let semicolon = tokens.get(end) == Some(&Token::Punct(';'));
                return end + usize::from(semicolon);
            }
            Token::Punct('(' | '[' | '{') => index = group_end(tokens, index),
            _ => index += 1,
        }
    }
    tokens.len()
}

/// The tokens of `#[cfg(test)]`.
const CFG_TEST_LENGTH: usize = 7;

/// Whether `#[cfg(test)]` starts at `index`.
fn is_cfg_test(tokens: &[Token], index: usize) -> bool {
    let punct = |offset: usize, c: char| tokens.get(index + offset) == Some(&Token::Punct(c));
    punct(0, '#')
        && punct(1, '[')
        && is_ident(tokens.get(index + 2), "cfg")
        && punct(3, '(')
        && is_ident(tokens.get(index + 4), "test")
        && punct(5, ')')
        && punct(6, ']')
}

/// `tokens` without the items marked `#[cfg(test)]` (their other attributes too).
fn without_test_items(tokens: Vec<Token>) -> Vec<Token> {
    let mut kept = Vec::with_capacity(tokens.len());
    let mut index = 0;
    while index < tokens.len() {
        if !is_cfg_test(&tokens, index) {
            kept.push(tokens[index].clone());
            index += 1;
            continue;
        }
        index += CFG_TEST_LENGTH;
        while tokens.get(index) == Some(&Token::Punct('#')) {
            index = group_end(&tokens, index + 1);
        }
        index = item_end(&tokens, index);
    }
    kept
}

/// The names of the modules a root declares with `mod name;`.
fn declared_modules(tokens: &[Token]) -> Vec<String> {
    tokens
        .windows(3)
        .filter_map(|window| match window {
            [
                Token::Ident(keyword, _),
                Token::Ident(name, _),
                Token::Punct(';'),
            ] if keyword == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The first segment below the module at `path` of every path that reaches it (`crate::`
/// then `path`, or `super::` climbing `depth` levels), with its line: at the crate root,
/// `crate::a::B` gives `a` and `crate::{a::B, C}` gives `a` and `C`; in `gateway`,
/// `crate::gateway::a::B` and `crate::{gateway::a::B}` give `a`.
fn module_path_heads(tokens: &[Token], depth: usize, path: &[String]) -> Vec<(usize, String)> {
    let mut heads = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let after_path = index > 0 && tokens[index - 1] == Token::Colons;
        let (climbed, below) = if is_ident(tokens.get(index), "crate") {
            (Some(index + 1), path)
        } else {
            (supers_to_root(tokens, index, depth), &[][..])
        };
        match climbed {
            Some(next) if !after_path && tokens.get(next) == Some(&Token::Colons) => {
                let (tree_heads, end) = heads_below(tokens, next + 1, below);
                heads.extend(tree_heads);
                index = end;
            }
            _ => index += 1,
        }
    }
    heads
}

/// When `depth` `super::`s start at `index`, the index of the last `super` plus one.
fn supers_to_root(tokens: &[Token], index: usize, depth: usize) -> Option<usize> {
    let mut at = index;
    for climbed in 0..depth {
        if !is_ident(tokens.get(at), "super") {
            return None;
        }
        at += 1;
        if climbed + 1 < depth {
            (tokens.get(at) == Some(&Token::Colons)).then_some(())?;
            at += 1;
        }
    }
    (depth > 0 && !is_ident(tokens.get(at + 1), "super")).then_some(at)
}

/// The heads below `path` of the use tree (or path) starting at `start`, and where it ends.
fn heads_below(tokens: &[Token], start: usize, path: &[String]) -> (Vec<(usize, String)>, usize) {
    let Some((first, rest)) = path.split_first() else {
        return tree_heads(tokens, start);
    };
    match tokens.get(start) {
        Some(Token::Ident(name, _))
            if name == first && tokens.get(start + 1) == Some(&Token::Colons) =>
        {
            heads_below(tokens, start + 2, rest)
        }
        Some(Token::Punct('{')) => {
            let end = group_end(tokens, start);
            let inner = &tokens[start + 1..end.saturating_sub(1).max(start + 1)];
            let heads = top_level_elements(inner)
                .iter()
                .flat_map(|element| heads_below(element, 0, path).0)
                .collect();
            (heads, end)
        }
        _ => (Vec::new(), start + 1),
    }
}

/// Whether `before` (the tokens before a name's `::`) ends with `self` or with `crate` and
/// `path`, so the name after it is one of this module's.
fn names_this_module(before: &[Token], path: &[String]) -> bool {
    let mut expected: Vec<Token> = vec![Token::Ident("crate".to_string(), 0)];
    for segment in path {
        expected.push(Token::Colons);
        expected.push(Token::Ident(segment.clone(), 0));
    }
    let same = |token: &Token, wanted: &Token| match (token, wanted) {
        (Token::Ident(name, _), Token::Ident(want, _)) => name == want,
        _ => token == wanted,
    };
    let ends_with = |suffix: &[Token]| {
        before.len() >= suffix.len()
            && before[before.len() - suffix.len()..]
                .iter()
                .zip(suffix)
                .all(|(token, wanted)| same(token, wanted))
            && (before.len() == suffix.len()
                || before[before.len() - suffix.len() - 1] != Token::Colons)
    };
    ends_with(&[Token::Ident("self".to_string(), 0)]) || ends_with(&expected)
}

/// The heads of the use tree (or path) starting at `start`, and where it ends.
fn tree_heads(tokens: &[Token], start: usize) -> (Vec<(usize, String)>, usize) {
    match tokens.get(start) {
        Some(Token::Ident(name, line)) if name != "self" => {
            (vec![(*line, name.clone())], start + 1)
        }
        Some(Token::Punct('{')) => {
            let end = group_end(tokens, start);
            let inner = &tokens[start + 1..end.saturating_sub(1).max(start + 1)];
            let heads = top_level_elements(inner)
                .iter()
                .filter_map(|element| match element.first() {
                    Some(Token::Ident(name, line)) if name != "self" => Some((*line, name.clone())),
                    _ => None,
                })
                .collect();
            (heads, end)
        }
        _ => (Vec::new(), start + 1),
    }
}

/// The names the root brings in with `use`, each with where it comes from:
/// `pub use a::b::{C, D as E};` gives `C` and `E` from module `a`.
fn root_imports(
    tokens: &[Token],
    modules: &BTreeMap<String, Vec<SourceFile>>,
    path: &[String],
) -> BTreeMap<String, Origin> {
    let mut imports = BTreeMap::new();
    for (start, end) in use_statements(tokens) {
        let mut leaves = Vec::new();
        let (tree, local) = below_module(&tokens[start + 1..end], path);
        use_leaves(tree, None, &mut leaves);
        for (head, leaf) in leaves {
            let origin = if local && modules.contains_key(&head) {
                Origin::Module(head)
            } else {
                Origin::Outside
            };
            imports.insert(leaf, origin);
        }
    }
    imports
}

/// A use tree with `crate::` and the module's `path` taken off its front, and whether it
/// names something in this module (not when it starts at `crate::` but outside `path`).
fn below_module<'t>(tree: &'t [Token], path: &[String]) -> (&'t [Token], bool) {
    if path.is_empty() || !is_ident(tree.first(), "crate") {
        return (tree, true);
    }
    let mut at = 1;
    for segment in path {
        let matches = tree.get(at) == Some(&Token::Colons) && is_ident(tree.get(at + 1), segment);
        if !matches {
            return (tree, false);
        }
        at += 2;
    }
    match tree.get(at) {
        Some(Token::Colons) => (&tree[at + 1..], true),
        _ => (tree, false),
    }
}

/// The token ranges of the root's `use` declarations: from `use` to just before its `;`.
fn use_statements(tokens: &[Token]) -> Vec<(usize, usize)> {
    let mut statements = Vec::new();
    let mut depth = 0usize;
    for (index, token) in tokens.iter().enumerate() {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth = depth.saturating_sub(1),
            Token::Ident(word, _) if word == "use" && depth == 0 => {
                let end = (index..tokens.len())
                    .find(|&end| tokens[end] == Token::Punct(';'))
                    .unwrap_or(tokens.len());
                statements.push((index, end));
            }
            _ => {}
        }
    }
    statements
}

/// The (first segment, imported name) pairs of a use tree; `crate::` and `self::` in front
/// are skipped, so the first segment is the module for a local path.
fn use_leaves(tree: &[Token], head: Option<&str>, out: &mut Vec<(String, String)>) {
    let mut head = head.map(str::to_string);
    let mut index = 0;
    while index < tree.len() {
        match &tree[index] {
            Token::Ident(word, _) if head.is_none() && (word == "crate" || word == "self") => {}
            Token::Ident(word, _) => {
                let first = head.get_or_insert_with(|| word.clone()).clone();
                if tree.get(index + 1) != Some(&Token::Colons) {
                    let leaf = match (tree.get(index + 1), tree.get(index + 2)) {
                        (Some(Token::Ident(keyword, _)), Some(Token::Ident(alias, _)))
                            if keyword == "as" =>
                        {
                            alias.clone()
                        }
                        _ => word.clone(),
                    };
                    out.push((first, leaf));
                    return;
                }
            }
            Token::Punct('{') => {
                let end = group_end(tree, index);
                let inner = &tree[index + 1..end.saturating_sub(1).max(index + 1)];
                for element in top_level_elements(inner) {
                    use_leaves(element, head.as_deref(), out);
                }
                return;
            }
            _ => {}
        }
        index += 1;
    }
}

/// The comma-separated elements of a group's inside, nested groups kept whole.
fn top_level_elements(inner: &[Token]) -> Vec<&[Token]> {
    let mut elements = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, token) in inner.iter().enumerate() {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth = depth.saturating_sub(1),
            Token::Punct(',') if depth == 0 => {
                elements.push(&inner[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    elements.push(&inner[start..]);
    elements
}

/// The root's code besides `mod` and `use` declarations and attributes, or `None` when there
/// is none (the root then is no module of its own).
fn root_body(tokens: &[Token]) -> Option<Vec<Token>> {
    let mut body = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let declaration_end = declaration_end(tokens, index);
        if declaration_end > index {
            index = declaration_end;
        } else {
            body.push(tokens[index].clone());
            index += 1;
        }
    }
    (!body.is_empty()).then_some(body)
}

/// When an attribute, or a `mod`, `use` or `extern crate` declaration (with its visibility)
/// starts at `index`, the index past it; else `index`.
fn declaration_end(tokens: &[Token], index: usize) -> usize {
    if tokens.get(index) == Some(&Token::Punct('#')) {
        let open = if tokens.get(index + 1) == Some(&Token::Punct('!')) {
            index + 2
        } else {
            index + 1
        };
        return group_end(tokens, open);
    }
    let mut at = index;
    if is_ident(tokens.get(at), "pub") {
        at += 1;
        if tokens.get(at) == Some(&Token::Punct('(')) {
            at = group_end(tokens, at);
        }
    }
    let declares = is_ident(tokens.get(at), "use")
        || is_ident(tokens.get(at), "extern")
        || (is_ident(tokens.get(at), "mod") && tokens.get(at + 2) == Some(&Token::Punct(';')));
    if !declares {
        return index;
    }
    (at..tokens.len())
        .find(|&end| tokens[end] == Token::Punct(';'))
        .map_or(tokens.len(), |end| end + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(root: &str, modules: &[(&str, &str)]) -> CrateSource {
        let file = |label: &str, text: &str| SourceFile {
            label: label.to_string(),
            text: text.to_string(),
        };
        CrateSource {
            path: Vec::new(),
            root: file("src/lib.rs", root),
            children_dir: "src".to_string(),
            modules: modules
                .iter()
                .map(|(name, text)| {
                    (
                        name.to_string(),
                        vec![file(&format!("src/{name}.rs"), text)],
                    )
                })
                .collect(),
        }
    }

    fn circles(crate_source: &CrateSource) -> Vec<Vec<String>> {
        crate_source
            .graph()
            .circles()
            .into_iter()
            .map(|circle| circle.into_iter().collect())
            .collect()
    }

    #[test]
    fn a_circle_between_two_modules_is_found_with_what_draws_it() {
        let crate_source = source(
            "mod a;\nmod b;\n",
            &[
                ("a", "use crate::b::Bee;\n"),
                ("b", "fn f() {\n    crate::a::go();\n}\n"),
            ],
        );
        let graph = crate_source.graph();
        let found = circles(&crate_source);
        assert_eq!(found, [["a", "b"]]);
        let message = graph.describe(&graph.circles()[0]);
        assert!(
            message.contains("a -> b\n      src/a.rs:1 crate::b"),
            "{message}"
        );
        assert!(
            message.contains("b -> a\n      src/b.rs:2 crate::a"),
            "{message}"
        );
    }

    #[test]
    fn a_re_exported_item_resolves_to_its_module() {
        let crate_source = source(
            "//! Docs.\nmod a;\nmod b;\npub use b::{inner::Bee as Thing, Other};\n",
            &[
                ("a", "use crate::{Thing, Other};\npub fn go() {}\n"),
                ("b", "use crate::a::go;\n"),
            ],
        );
        let graph = crate_source.graph();
        let evidence = &graph.arrows[&("a".to_string(), "b".to_string())];
        assert_eq!(
            evidence.iter().collect::<Vec<_>>(),
            ["src/a.rs:1 crate::Other", "src/a.rs:1 crate::Thing"]
        );
        assert_eq!(circles(&crate_source), [["a", "b"]]);
    }

    #[test]
    fn a_root_of_only_mods_and_re_exports_is_no_module() {
        let crate_source = source(
            "//! Docs.\n#![forbid(unsafe_code)]\nmod a;\npub mod b;\npub use a::Ay;\n\
             #[cfg(test)]\nmod tests { fn t() { b::f(); } }\n",
            &[
                ("a", "pub struct Ay;\n"),
                ("b", "use crate::Ay;\npub fn f() {}\n"),
            ],
        );
        assert!(circles(&crate_source).is_empty());
        let graph = crate_source.graph();
        assert!(
            graph
                .arrows
                .keys()
                .all(|(from, to)| from != ROOT && to != ROOT)
        );
    }

    #[test]
    fn a_root_with_code_is_a_module_its_callers_can_circle_with() {
        let crate_source = source(
            "mod a;\nuse a::run;\nstruct Bad;\nfn main() { run() }\n",
            &[("a", "pub fn run() -> crate::Bad { crate::Bad }\n")],
        );
        assert_eq!(circles(&crate_source), [["a", ROOT]]);
    }

    #[test]
    fn comments_literals_and_test_items_draw_no_arrow() {
        let crate_source = source(
            "mod a;\nmod b;\n",
            &[
                (
                    "a",
                    "/// See [`crate::b`].\nconst S: &str = \"crate::b\";\nconst Q: char = '\"';\n",
                ),
                (
                    "b",
                    "use crate::a::S;\nconst R: &str = r#\"crate::a\"#;\n\
                     #[cfg(test)]\nuse crate::a::{Q, S};\n\
                     #[cfg(test)]\nmod tests { use crate::a::Q; }\n",
                ),
            ],
        );
        let graph = crate_source.graph();
        let arrows: Vec<_> = graph.arrows.keys().cloned().collect();
        assert_eq!(arrows, [("b".to_string(), "a".to_string())]);
        assert!(circles(&crate_source).is_empty());
    }

    #[test]
    fn super_climbing_to_the_root_counts_as_crate() {
        assert_eq!(module_depth("src/a/b.rs", "src"), 2);
        assert_eq!(module_depth("src/a/mod.rs", "src"), 1);
        let crate_source = CrateSource {
            path: Vec::new(),
            children_dir: "src".to_string(),
            root: SourceFile {
                label: "src/lib.rs".into(),
                text: "mod a;\nmod b;\n".into(),
            },
            modules: BTreeMap::from([
                (
                    "a".to_string(),
                    vec![SourceFile {
                        label: "src/a/inner.rs".into(),
                        text: "use super::super::b::Bee;\nuse super::Sibling;\n".into(),
                    }],
                ),
                (
                    "b".to_string(),
                    vec![SourceFile {
                        label: "src/b.rs".into(),
                        text: "use super::a::Ay;\n".into(),
                    }],
                ),
            ]),
        };
        assert_eq!(circles(&crate_source), [["a", "b"]]);
    }

    /// A made-up crate written to a fresh directory: `(path under it, text)` pairs.
    fn nested_crate(name: &str, files: &[(&str, &str)]) -> Vec<CrateSource> {
        let dir = std::env::temp_dir().join(format!("tidy-{name}-{}", std::process::id()));
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let sources = CrateSource::read(&dir.join("src/lib.rs"));
        std::fs::remove_dir_all(&dir).unwrap();
        sources
    }

    #[test]
    fn a_circle_between_a_directorys_children_is_found_with_what_draws_it() {
        let sources = nested_crate(
            "child-circle",
            &[
                ("src/lib.rs", "mod gate;\nmod other;\n"),
                ("src/other.rs", "pub struct Free;\n"),
                (
                    "src/gate/mod.rs",
                    "//! Docs.\nmod a;\nmod b;\npub use a::Ay;\nuse crate::other::Free;\n",
                ),
                ("src/gate/a.rs", "use super::b::Bee;\npub struct Ay;\n"),
                (
                    "src/gate/b.rs",
                    "pub struct Bee(crate::gate::Ay, super::Free);\nmod deep;\n",
                ),
                (
                    "src/gate/b/deep.rs",
                    "use crate::{gate::{a::Ay}, other::Free};\n",
                ),
            ],
        );
        let names: Vec<String> = sources.iter().map(CrateSource::name).collect();
        assert_eq!(names, ["", "gate", "gate::b"]);
        let gate = &sources[1];
        assert_eq!(gate.root_node(), "mod.rs");
        let graph = gate.graph();
        let arrows: Vec<_> = graph.arrows.keys().cloned().collect();
        assert_eq!(
            arrows,
            [
                ("a".to_string(), "b".to_string()),
                ("b".to_string(), "a".to_string())
            ]
        );
        let circles = graph.circles();
        assert_eq!(circles.len(), 1);
        let message = graph.describe(&circles[0]);
        assert!(message.contains("circle: a, b\n"), "{message}");
        assert!(message.contains("a.rs:1 crate::gate::b\n"), "{message}");
        assert!(message.contains("b.rs:1 crate::gate::Ay\n"), "{message}");
        assert!(message.contains("deep.rs:1 crate::gate::a\n"), "{message}");
    }

    #[test]
    fn a_mod_rs_of_only_mods_and_uses_is_no_node_and_one_with_code_is() {
        let only_declarations = nested_crate(
            "declarations",
            &[
                ("src/lib.rs", "mod gate;\n"),
                ("src/gate/mod.rs", "mod a;\nmod b;\npub use a::Ay;\n"),
                ("src/gate/a.rs", "pub struct Ay;\n"),
                ("src/gate/b.rs", "use super::Ay;\n"),
            ],
        );
        let graph = only_declarations[1].graph();
        assert!(
            graph
                .arrows
                .keys()
                .all(|(from, to)| from != "mod.rs" && to != "mod.rs")
        );
        assert!(graph.circles().is_empty());
        let with_code = nested_crate(
            "code",
            &[
                ("src/lib.rs", "mod gate;\n"),
                (
                    "src/gate/mod.rs",
                    "mod a;\npub struct Shared;\nfn build() { a::run() }\n",
                ),
                (
                    "src/gate/a.rs",
                    "pub fn run() -> super::Shared { super::Shared }\n",
                ),
            ],
        );
        let graph = with_code[1].graph();
        let found: Vec<Vec<String>> = graph
            .circles()
            .into_iter()
            .map(|circle| circle.into_iter().collect())
            .collect();
        assert_eq!(found, [["a", "mod.rs"]]);
    }
}
