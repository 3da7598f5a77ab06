//! Reading a Dockerfile: lines into instructions, shell-style words with
//! variable substitution, and the path patterns of `COPY` sources and
//! `.dockerignore`.
//!
//! - [`parse`] joins continuation lines (the escape character, `\` or the
//!   one a `# escape=` directive names, at the end of a line), drops
//!   comments and blank lines, and keeps the line number of each
//!   instruction for error messages;
//! - [`shell_words`] splits arguments like the Docker builder does:
//!   whitespace separates words, single quotes are literal, double quotes
//!   group, the escape character escapes, and `$NAME`, `${NAME}`,
//!   `${NAME:-default}` and `${NAME:+alternative}` are substituted;
//! - [`json_array`] reads the exec form (`["a", "b"]`);
//! - [`Pattern`] matches paths with `*`, `?`, `[...]` inside one segment
//!   and `**` across segments; [`DockerIgnore`] applies `.dockerignore`
//!   rules (later rules win, `!` re-includes, a matched folder excludes
//!   what is under it).

use std::collections::BTreeMap;

/// One instruction, with the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// 1-based line number of the instruction's first line.
    pub line: usize,
    /// The keyword, upper-case (`COPY`).
    pub keyword: String,
    /// Everything after the keyword, continuation lines joined, trimmed.
    pub args: String,
}

impl Instruction {
    /// The instruction as written (shortened), for error messages.
    pub fn text(&self) -> String {
        let mut text = format!("{} {}", self.keyword, self.args);
        if text.chars().count() > 120 {
            text = text.chars().take(117).collect::<String>() + "...";
        }
        text
    }
}

/// A Dockerfile that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Dockerfile line {line}: {reason}")]
pub struct SyntaxError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The instructions of a Dockerfile, and the escape character in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// Instructions in order.
    pub instructions: Vec<Instruction>,
    /// `\` unless a `# escape=` directive says otherwise.
    pub escape: char,
}

/// Parses a Dockerfile's text.
pub fn parse(source: &str) -> Result<Dockerfile, SyntaxError> {
    let mut escape = '\\';
    let mut instructions = Vec::new();
    let mut directives_open = true;
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in source.lines().enumerate() {
        let number = index + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim();
        if directives_open {
            if let Some(directive) = trimmed.strip_prefix('#')
                && let Some((key, value)) = directive.split_once('=')
            {
                let key = key.trim().to_ascii_lowercase();
                if key == "escape" {
                    escape = match value.trim() {
                        "\\" => '\\',
                        "`" => '`',
                        other => {
                            return Err(SyntaxError {
                                line: number,
                                reason: format!("invalid escape directive `{other}` (use \\ or `)"),
                            });
                        }
                    };
                    continue;
                }
                if key.chars().all(|c| c.is_ascii_alphanumeric()) && !key.is_empty() {
                    // `# syntax=` and other parser directives.
                    continue;
                }
            }
            directives_open = false;
        }
        if pending.is_some() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            // Blank and comment lines inside a continuation are dropped.
            continue;
        }
        if pending.is_none() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        let (body, continues) = match line.trim_end().strip_suffix(escape) {
            Some(body) => (body, true),
            None => (line, false),
        };
        let joined = match pending.take() {
            Some((start, mut text)) => {
                text.push_str(body);
                (start, text)
            }
            None => (number, body.trim_start().to_owned()),
        };
        if continues {
            pending = Some(joined);
        } else {
            instructions.push(instruction(joined.0, &joined.1)?);
        }
    }
    if let Some((start, text)) = pending {
        instructions.push(instruction(start, &text)?);
    }
    Ok(Dockerfile { instructions, escape })
}

fn instruction(line: usize, text: &str) -> Result<Instruction, SyntaxError> {
    let text = text.trim();
    let (keyword, args) = match text.find(char::is_whitespace) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    if keyword.is_empty() || !keyword.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(SyntaxError {
            line,
            reason: format!("`{keyword}` is not an instruction"),
        });
    }
    Ok(Instruction {
        line,
        keyword: keyword.to_ascii_uppercase(),
        args: args.to_owned(),
    })
}

/// The exec form `["a", "b"]`, when `args` is a JSON array of strings.
pub fn json_array(args: &str) -> Option<Vec<String>> {
    let trimmed = args.trim();
    if !trimmed.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(trimmed).ok()
}

/// Splits `text` into words the way the Docker builder does, substituting
/// variables from `vars` (unset variables expand to nothing).
pub fn shell_words(text: &str, vars: &BTreeMap<String, String>, escape: char) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".to_owned()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) if c == escape => match chars.peek() {
                            Some(&next) if matches!(next, '"' | '$') || next == escape => {
                                word.push(next);
                                chars.next();
                            }
                            _ => word.push(c),
                        },
                        Some('$') => word.push_str(&substitute(&mut chars, vars, escape)?),
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote".to_owned()),
                    }
                }
            }
            c if c == escape => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            '$' => {
                // An unquoted variable that expands to nothing makes no word.
                let value = substitute(&mut chars, vars, escape)?;
                in_word |= !value.is_empty();
                word.push_str(&value);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Substitutes variables in `text` as one word (quotes removed, spaces
/// kept), for values such as `WORKDIR` and `USER`.
pub fn shell_word(text: &str, vars: &BTreeMap<String, String>, escape: char) -> Result<String, String> {
    let words = shell_words(text, vars, escape)?;
    Ok(words.join(" "))
}

/// Reads the variable reference after a `$` and returns its value.
fn substitute(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    vars: &BTreeMap<String, String>,
    escape: char,
) -> Result<String, String> {
    match chars.peek() {
        Some('{') => {
            chars.next();
            let mut inner = String::new();
            let mut depth = 1;
            for c in chars.by_ref() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                inner.push(c);
            }
            if depth != 0 {
                return Err("unterminated ${...}".to_owned());
            }
            let name_end = inner
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(inner.len());
            let (name, modifier) = inner.split_at(name_end);
            if name.is_empty() {
                return Err(format!("bad substitution `${{{inner}}}`"));
            }
            let value = vars.get(name).filter(|v| !v.is_empty());
            match modifier {
                "" => Ok(vars.get(name).cloned().unwrap_or_default()),
                m if m.starts_with(":-") => match value {
                    Some(value) => Ok(value.clone()),
                    None => Ok(shell_word(&m[2..], vars, escape)?),
                },
                m if m.starts_with(":+") => match value {
                    Some(_) => Ok(shell_word(&m[2..], vars, escape)?),
                    None => Ok(String::new()),
                },
                _ => Err(format!(
                    "unsupported substitution `${{{inner}}}` (supported: ${{NAME}}, ${{NAME:-default}}, ${{NAME:+alternative}})"
                )),
            }
        }
        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
            let mut name = String::new();
            while let Some(c) = chars.peek() {
                if c.is_ascii_alphanumeric() || *c == '_' {
                    name.push(*c);
                    chars.next();
                } else {
                    break;
                }
            }
            Ok(vars.get(&name).cloned().unwrap_or_default())
        }
        _ => Ok("$".to_owned()),
    }
}

/// A path pattern: `/`-separated segments with `*`, `?` and `[...]`
/// matching within a segment and `**` matching any number of segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    segments: Vec<String>,
}

impl Pattern {
    /// A pattern from its text; leading `/`, `./`, empty and `.` segments
    /// are dropped.
    pub fn new(text: &str) -> Self {
        let segments = text
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .map(str::to_owned)
            .collect();
        Self { segments }
    }

    /// Whether the pattern has any wildcard.
    pub fn has_wildcards(text: &str) -> bool {
        text.contains(['*', '?', '['])
    }

    /// Whether `path` (normalized, `/`-separated) matches the whole pattern.
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').collect()
        };
        match_segments(&self.segments, &parts)
    }
}

fn match_segments(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => (0..=path.len()).any(|skip| match_segments(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((head, tail)) => match_segment(first, head) && match_segments(rest, tail),
            None => false,
        },
    }
}

/// fnmatch-style matching of one segment.
fn match_segment(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                backtrack = Some((p, t));
                p += 1;
                continue;
            }
            Some('?') => Some(p + 1),
            Some('[') => match_class(&pattern, p, text[t]),
            Some('\\') => match pattern.get(p + 1) {
                Some(c) if *c == text[t] => Some(p + 2),
                _ => None,
            },
            Some(c) if *c == text[t] => Some(p + 1),
            _ => None,
        };
        match step {
            Some(next) => {
                p = next;
                t += 1;
            }
            None => match backtrack {
                Some((star, at)) => {
                    p = star + 1;
                    t = at + 1;
                    backtrack = Some((star, at + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class starting at `pattern[start] == '['`;
/// returns the index after the class when it matches.
fn match_class(pattern: &[char], start: usize, c: char) -> Option<usize> {
    let mut i = start + 1;
    let negated = matches!(pattern.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let current = *pattern.get(i)?;
        if current == ']' && !first {
            break;
        }
        first = false;
        let (low, next) = if current == '\\' {
            (*pattern.get(i + 1)?, i + 2)
        } else {
            (current, i + 1)
        };
        if pattern.get(next) == Some(&'-') && pattern.get(next + 1).is_some_and(|c| *c != ']') {
            let high = *pattern.get(next + 1)?;
            if low <= c && c <= high {
                matched = true;
            }
            i = next + 2;
        } else {
            if low == c {
                matched = true;
            }
            i = next;
        }
    }
    (matched != negated).then_some(i + 1)
}

/// The rules of a `.dockerignore` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerIgnore {
    rules: Vec<(Pattern, bool)>,
}

impl DockerIgnore {
    /// Parses a `.dockerignore` (comments and blank lines skipped).
    pub fn parse(text: &str) -> Self {
        let rules = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| match line.strip_prefix('!') {
                Some(rest) => (Pattern::new(rest.trim()), false),
                None => (Pattern::new(line), true),
            })
            .filter(|(pattern, _)| !pattern.segments.is_empty())
            .collect();
        Self { rules }
    }

    /// Whether `path` is left out of the build context: the last rule that
    /// matches the path or one of its parent folders decides.
    pub fn excludes(&self, path: &str) -> bool {
        let mut excluded = false;
        for (pattern, exclude) in &self.rules {
            let mut candidate = path;
            let matched = loop {
                if pattern.matches(candidate) {
                    break true;
                }
                match candidate.rfind('/') {
                    Some(at) => candidate = &candidate[..at],
                    None => break false,
                }
            };
            if matched {
                excluded = *exclude;
            }
        }
        excluded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn lines_continuations_and_comments() {
        let file = parse(
            "# syntax=docker/dockerfile:1\n\nFROM scratch\n# a comment\ncopy a \\\n  # inside\n  b /app/\r\nCMD [\"/app/b\"]\n",
        )
        .unwrap();
        assert_eq!(file.escape, '\\');
        let keywords: Vec<_> = file.instructions.iter().map(|i| (i.line, i.keyword.as_str())).collect();
        assert_eq!(keywords, vec![(3, "FROM"), (5, "COPY"), (8, "CMD")]);
        assert_eq!(file.instructions[1].args, "a   b /app/");
    }

    #[test]
    fn the_escape_directive_changes_the_continuation() {
        let file = parse("# escape=`\nFROM scratch\nCOPY a `\n b c:\\dir\n").unwrap();
        assert_eq!(file.escape, '`');
        assert_eq!(file.instructions[1].args, "a  b c:\\dir");
        assert!(parse("FROM scratch\n!!! x\n").is_err());
    }

    #[test]
    fn words_quotes_and_variables() {
        let v = vars(&[("NAME", "api"), ("EMPTY", ""), ("SPACE", "a b")]);
        let words = shell_words(
            r#"plain "double $NAME" 'single $NAME' ${NAME}-x ${EMPTY:-dflt} ${NAME:+alt} ${UNSET} esc\ aped \$NAME"#,
            &v,
            '\\',
        )
        .unwrap();
        assert_eq!(
            words,
            vec![
                "plain",
                "double api",
                "single $NAME",
                "api-x",
                "dflt",
                "alt",
                "esc aped",
                "$NAME"
            ]
        );
        assert_eq!(shell_words("$SPACE", &v, '\\').unwrap(), vec!["a b"]);
        assert!(shell_words("${NAME#x}", &v, '\\').is_err());
        assert!(shell_words("\"open", &v, '\\').is_err());
    }

    #[test]
    fn json_arrays_are_the_exec_form() {
        assert_eq!(
            json_array(r#"["/app", "--port", "80"]"#).unwrap(),
            vec!["/app", "--port", "80"]
        );
        assert_eq!(json_array("/app --port 80"), None);
        assert_eq!(json_array("[not json"), None);
    }

    #[test]
    fn patterns_match_segments() {
        assert!(Pattern::new("*.dll").matches("a.dll"));
        assert!(!Pattern::new("*.dll").matches("bin/a.dll"));
        assert!(Pattern::new("bin/*.dll").matches("bin/a.dll"));
        assert!(Pattern::new("**/*.dll").matches("a/b/c.dll"));
        assert!(Pattern::new("**/*.dll").matches("c.dll"));
        assert!(Pattern::new("/src/?.txt").matches("src/a.txt"));
        assert!(Pattern::new("[a-c]x").matches("bx"));
        assert!(!Pattern::new("[!a-c]x").matches("bx"));
        assert!(Pattern::new("a*b*c").matches("aXbYbc"));
        assert!(!Pattern::new("a*b").matches("a/b"));
    }

    #[test]
    fn dockerignore_rules() {
        let ignore = DockerIgnore::parse("# comment\n**/*.log\nbin\n!bin/keep.txt\nsecrets/\n");
        assert!(ignore.excludes("x/y/z.log"));
        assert!(ignore.excludes("bin/tool"));
        assert!(!ignore.excludes("bin/keep.txt"));
        assert!(ignore.excludes("secrets/key.pem"));
        assert!(!ignore.excludes("src/main.rs"));
    }
}
