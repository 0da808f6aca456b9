//! The docs hold together: every relative link in README.md and in the book (docs/src)
//! points at a file that exists and, with a `#fragment`, at a heading that page has (its
//! anchor computed as mdBook computes it: the heading's text lowercased, whitespace to
//! `-`, everything but letters, digits, `_` and `-` dropped, `-1`, `-2`… for repeats); a
//! book page links nowhere outside docs/src (the built book could not serve it); and every
//! page of docs/src is in SUMMARY.md (mdBook builds only what SUMMARY.md names). Failures
//! are listed as `file:line: problem`. Building the book itself is docs/build.sh's job.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    root().join("docs/src")
}

/// The parser options mdBook uses for a book page; README is read as GitHub reads it
/// (no smart punctuation, which would change what a heading's text is).
fn options(smart_punctuation: bool) -> Options {
    let mut o = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES;
    if smart_punctuation {
        o |= Options::ENABLE_SMART_PUNCTUATION;
    }
    o
}

/// A heading's anchor, as mdBook 0.5 makes it from the heading's text
/// (mdbook-html's `id_from_content`); GitHub's for README is the same for our headings.
fn anchor(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// What one Markdown file holds: its headings' anchors and its links (line, destination).
#[derive(Clone)]
struct Page {
    anchors: HashSet<String>,
    links: Vec<(usize, String)>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|&b| b == b'\n').count() + 1
}

fn read_page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let in_book = path.starts_with(book_src());
    let mut anchors = HashSet::new();
    let mut links = Vec::new();
    // (explicit id, text so far) of the heading being read.
    let mut heading: Option<(Option<String>, String)> = None;
    for (event, range) in Parser::new_ext(&text, options(in_book)).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((id.map(|i| i.to_string()), String::new()));
            }
            Event::End(TagEnd::Heading(_)) => {
                let (id, text) = heading.take().expect("a heading ends after it starts");
                let base = id.unwrap_or_else(|| anchor(&text));
                // Repeated headings get -1, -2… as mdBook's `unique_id` gives them.
                let mut unique = base.clone();
                let mut n = 0;
                while !anchors.insert(unique.clone()) {
                    n += 1;
                    unique = format!("{base}-{n}");
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, text)) = heading.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                links.push((line_of(&text, range.start), dest_url.to_string()));
            }
            _ => {}
        }
    }
    Page { anchors, links }
}

/// `path` with `.` and `..` taken out, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every problem in the links of `files`, as `file:line: problem`.
fn link_problems(files: &[PathBuf]) -> Vec<String> {
    let mut pages: BTreeMap<PathBuf, Page> = BTreeMap::new();
    let page = |p: &Path, pages: &mut BTreeMap<PathBuf, Page>| {
        if !pages.contains_key(p) {
            pages.insert(p.to_path_buf(), read_page(p));
        }
    };
    let mut problems = Vec::new();
    for file in files {
        page(file, &mut pages);
        let links = pages[file].links.clone();
        for (line, dest) in links {
            let at = format!("{}:{line}", shown(file));
            // Absolute URLs (https:, mailto:, …) are not ours to check.
            let scheme = dest.split_once(':').map(|(s, _)| s);
            if scheme.is_some_and(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            }) {
                continue;
            }
            let (path_part, fragment) = match dest.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (dest.as_str(), None),
            };
            if path_part.starts_with('/') {
                problems.push(format!(
                    "{at}: link {dest:?} is absolute; link relative to the file"
                ));
                continue;
            }
            let target = if path_part.is_empty() {
                file.clone()
            } else {
                normalize(&file.parent().unwrap().join(path_part))
            };
            if file.starts_with(book_src()) && !target.starts_with(book_src()) {
                problems.push(format!(
                    "{at}: link {dest:?} leaves docs/src, which the built book cannot serve; \
                     name the path in `code` instead"
                ));
                continue;
            }
            if !target.exists() {
                problems.push(format!(
                    "{at}: link {dest:?}: {} does not exist",
                    shown(&target)
                ));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if target.extension().is_none_or(|e| e != "md") {
                problems.push(format!(
                    "{at}: link {dest:?} has an anchor into a file that is not Markdown"
                ));
                continue;
            }
            page(&target, &mut pages);
            if !pages[&target].anchors.contains(fragment) {
                let mut known: Vec<_> = pages[&target].anchors.iter().cloned().collect();
                known.sort();
                problems.push(format!(
                    "{at}: link {dest:?}: {} has no heading with anchor #{fragment} (it has: {})",
                    shown(&target),
                    known.join(", ")
                ));
            }
        }
    }
    problems
}

fn all_docs() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    markdown_files(&book_src(), &mut files);
    files
}

#[test]
fn every_relative_link_resolves_to_a_file_and_an_anchor() {
    let problems = link_problems(&all_docs());
    assert!(
        problems.is_empty(),
        "{} broken link(s) in the docs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_book_page_is_in_summary() {
    let summary = book_src().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = read_page(&summary)
        .links
        .iter()
        .map(|(_, dest)| normalize(&book_src().join(dest.split('#').next().unwrap())))
        .collect();
    let mut pages = Vec::new();
    markdown_files(&book_src(), &mut pages);
    let missing: Vec<String> = pages
        .iter()
        .filter(|p| **p != summary && !listed.contains(*p))
        .map(|p| {
            format!(
                "{}: not in docs/src/SUMMARY.md (mdBook would not build it)",
                shown(p)
            )
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_checker_finds_what_it_should() {
    let dir = std::env::temp_dir().join(format!("rb-docs-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.md");
    std::fs::write(
        &a,
        "# Title\n\n[ok](b.md#one-two) [ok](#title) [web](https://example.com/x#y)\n\
         [ok](b.md#same-1) [ok](b.md#custom) [ok](b.md#code-and-text)\n\n\
         [gone](c.md)\n[no anchor](b.md#nope)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.md"),
        "# One, two!\n\n## Same\n\n## Same\n\n## Explicit {#custom}\n\n## `code` and text\n",
    )
    .unwrap();
    let problems = link_problems(std::slice::from_ref(&a));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("a.md:6: link \"c.md\""),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("a.md:7: link \"b.md#nope\""),
        "{problems:#?}"
    );
    assert_eq!(
        anchor("Acceptance scenarios S1–S6"),
        "acceptance-scenarios-s1s6"
    );
    assert_eq!(anchor("Scale: 5,000 nodes"), "scale-5000-nodes");
    assert_eq!(anchor("rust-batch run flags"), "rust-batch-run-flags");
}
