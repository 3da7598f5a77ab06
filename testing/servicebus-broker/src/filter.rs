//! Azure Service Bus SQL rule filter (`SqlRuleFilter`) parser and evaluator.
//!
//! Follows the "Subscription Rule SQL Filter Syntax" reference of Azure Service
//! Bus (a subset of SQL-92). Supported grammar (keywords case-insensitive):
//!
//! ```text
//! predicate  ::= predicate OR predicate | predicate AND predicate
//!              | NOT predicate
//!              | expression { = | <> | != | < | <= | > | >= } expression
//!              | expression IS [NOT] NULL
//!              | expression [NOT] IN ( expression [, ...] )
//!              | expression [NOT] LIKE pattern [ESCAPE escape_char]
//!              | EXISTS ( property )
//!              | ( predicate ) | expression
//! expression ::= constant | property | property ( string-expression )
//!              | expression { + | - | * | / | % } expression
//!              | { + | - } expression | ( expression )
//! property   ::= [ sys. | user. ] name
//! name       ::= regular_identifier | [delimited ]] identifier] | "quoted "" identifier"
//! constant   ::= 'string with '' escaping' | integer | decimal | float-with-exponent
//!              | TRUE | FALSE | NULL
//! ```
//!
//! Precedence, lowest first: `OR`, `AND`, `NOT`, comparison / `IS` / `IN` /
//! `LIKE` (non-associative), `+ -`, `* / %`, unary `+ -`. So `NOT a = 1`
//! means `NOT (a = 1)` and `a OR b AND c` means `a OR (b AND c)`, as in SQL.
//!
//! Semantics and choices where the reference is silent or not applicable:
//! * Three-valued logic: SQL `NULL` and a missing property are both UNKNOWN.
//!   Arithmetic, comparison, `LIKE` and unary operators with an UNKNOWN operand
//!   give UNKNOWN; `x IN (...)` is UNKNOWN when `x` is UNKNOWN or when no item
//!   matches and some item is UNKNOWN; `AND` / `OR` / `NOT` use the SQL truth
//!   tables. A filter matches only when the whole expression is TRUE.
//! * `IS NULL` is TRUE when the property is missing or its value is null; it is
//!   never UNKNOWN. `EXISTS(p)` is TRUE when the property is present, even if
//!   its value is null.
//! * Type rules follow C# binding as the reference says: `Int` op `Int` stays
//!   integer (`/` truncates, overflow or division by zero is UNKNOWN), `Int`
//!   with `Float` promotes to `Float`; `String + String` concatenates.
//!   Strings compare ordinally (UTF-16 code units, like .NET ordinal) with all
//!   six comparison operators; booleans support only `=` and `<>`.
//!   Comparing or combining mismatched types (e.g. a string with a number) has
//!   no C# binding; the real broker fails the evaluation, and here the result is
//!   UNKNOWN (so the filter does not match, even under `NOT`).
//! * A non-boolean value used where a predicate is expected (e.g. a filter
//!   that is just `5`, or `user.n AND TRUE` where `n` is an integer) is UNKNOWN.
//!   A boolean property can be used directly as a predicate (`user.flag`).
//! * System property names are matched case-insensitively and passed to
//!   [`FilterSubject::system`] in their canonical spelling (`sys.label` asks
//!   for `"Label"`); names not in the known list are passed as written.
//!   The reference says evaluating a nonexistent system property is an error;
//!   here a `None` from [`FilterSubject::system`] is simply UNKNOWN.
//!   User property names are passed exactly as written (case preserved).
//! * `LIKE` supports `%` (any sequence) and `_` (one character); matching is
//!   ordinal and case-sensitive. An escape character makes the next character
//!   literal; the escape must be exactly one character.
//! * `property(name)` returns the property named by a string expression; the
//!   name may carry a `sys.` or `user.` prefix (default user scope).
//!   `newid()` and `@parameters` are not supported.
//! * Error positions are zero-based character offsets into the expression.
//! * Nesting of parentheses, `NOT` and unary signs is limited to 128 levels
//!   (a parse error), so hostile input cannot overflow the stack.
//!
//! Over 800 lines on purpose: a grammar's parser and its evaluator, read
//! together production by production.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A value in a filter expression or a message property.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// `NULL`, or a property whose value is null.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// A 64-bit integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    String(String),
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Bool(v)
    }
}
impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}
impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Int(i64::from(v))
    }
}
impl From<f64> for SqlValue {
    fn from(v: f64) -> Self {
        SqlValue::Float(v)
    }
}
impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::String(v.to_owned())
    }
}
impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::String(v)
    }
}

/// What a filter reads from a message.
pub trait FilterSubject {
    /// A system property by its Service Bus name (`Label`, `MessageId`, `CorrelationId`, `To`, `ReplyTo`, `ContentType`, `SessionId`, `ReplyToSessionId`, `DeliveryCount`, `SequenceNumber`, `EnqueuedTimeUtc`, ...), as in `sys.Label`.
    fn system(&self, name: &str) -> Option<SqlValue>;
    /// A user (application) property, as in `user.color` or bare `color`.
    fn user(&self, name: &str) -> Option<SqlValue>;
}

/// Error from [`SqlFilter::parse`]. Positions are zero-based character offsets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// A token other than the expected one.
    #[error("syntax error at position {position}: expected {expected}, found {found}")]
    Syntax {
        /// Zero-based character offset.
        position: usize,
        /// What the grammar allows there.
        expected: String,
        /// What was there.
        found: String,
    },
    /// A string literal without its closing quote.
    #[error("unterminated string literal starting at position {position}: expected closing '")]
    UnterminatedString {
        /// Zero-based character offset of the opening quote.
        position: usize,
    },
    /// A `[...]` or `"..."` identifier without its closing delimiter.
    #[error("unterminated quoted identifier starting at position {position}: expected closing {expected}")]
    UnterminatedIdentifier {
        /// Zero-based character offset of the opening delimiter.
        position: usize,
        /// The closing delimiter.
        expected: char,
    },
    /// A malformed or out-of-range numeric literal.
    #[error("invalid number '{text}' at position {position}: expected {expected}")]
    InvalidNumber {
        /// Zero-based character offset.
        position: usize,
        /// The literal as written.
        text: String,
        /// What a number may be.
        expected: String,
    },
    /// A constant `LIKE` pattern or `ESCAPE` operand that cannot be used.
    #[error("invalid LIKE pattern at position {position}: expected {expected}")]
    InvalidLike {
        /// Zero-based character offset.
        position: usize,
        /// What the pattern or escape must be.
        expected: String,
    },
}

impl FilterError {
    /// Zero-based character offset where the problem was found.
    pub fn position(&self) -> usize {
        match self {
            FilterError::Syntax { position, .. }
            | FilterError::UnterminatedString { position }
            | FilterError::UnterminatedIdentifier { position, .. }
            | FilterError::InvalidNumber { position, .. }
            | FilterError::InvalidLike { position, .. } => *position,
        }
    }
}

/// A parsed Service Bus SQL filter.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlFilter {
    source: String,
    root: Expr,
}

impl SqlFilter {
    /// Parses a filter expression.
    pub fn parse(expr: &str) -> Result<Self, FilterError> {
        let tokens = lex(expr)?;
        let mut parser = Parser {
            tokens,
            idx: 0,
            depth: 0,
        };
        let root = parser.parse_or()?;
        let tok = parser.peek();
        if tok.kind != TokKind::Eof {
            return Err(FilterError::Syntax {
                position: tok.pos,
                expected: "AND, OR, or end of expression".into(),
                found: tok.kind.describe(),
            });
        }
        Ok(SqlFilter {
            source: expr.to_owned(),
            root,
        })
    }

    /// True when the filter evaluates to TRUE (not FALSE, not UNKNOWN).
    pub fn matches(&self, subject: &dyn FilterSubject) -> bool {
        self.evaluate(subject) == Some(true)
    }

    /// Three-valued result: `Some(true)`, `Some(false)`, or `None` for UNKNOWN.
    pub fn evaluate(&self, subject: &dyn FilterSubject) -> Option<bool> {
        match eval(&self.root, subject) {
            SqlValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The expression text this filter was parsed from.
    pub fn expression(&self) -> &str {
        &self.source
    }
}

impl FromStr for SqlFilter {
    type Err = FilterError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SqlFilter::parse(s)
    }
}

impl fmt::Display for SqlFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

// ---------------------------------------------------------------------------
// Expression tree

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    System,
    User,
}

#[derive(Debug, Clone, PartialEq)]
struct PropRef {
    scope: Scope,
    name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn test(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::Ne => ord != Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Le => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Ge => ord != Ordering::Less,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum LikeTok {
    AnySeq,
    AnyOne,
    Lit(char),
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Const(SqlValue),
    Prop(PropRef),
    PropertyFn(Box<Expr>),
    Exists(PropRef),
    Neg(Box<Expr>),
    Plus(Box<Expr>),
    Not(Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    In {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        escape: Option<Box<Expr>>,
        negated: bool,
        /// Pre-compiled pattern when pattern and escape are constants.
        compiled: Option<Vec<LikeTok>>,
    },
}

// ---------------------------------------------------------------------------
// Evaluation

/// Known system property names, matched case-insensitively.
const SYSTEM_PROPERTIES: &[&str] = &[
    "MessageId",
    "CorrelationId",
    "To",
    "ReplyTo",
    "Label",
    "Subject",
    "ContentType",
    "SessionId",
    "ReplyToSessionId",
    "PartitionKey",
    "ViaPartitionKey",
    "TransactionPartitionKey",
    "DeliveryCount",
    "SequenceNumber",
    "EnqueuedSequenceNumber",
    "EnqueuedTimeUtc",
    "ScheduledEnqueueTimeUtc",
    "TimeToLive",
    "ExpiresAtUtc",
    "LockToken",
    "LockedUntilUtc",
    "Size",
    "State",
    "DeadLetterSource",
    "DeadLetterReason",
    "DeadLetterErrorDescription",
];

fn canonical_system_name(name: &str) -> String {
    SYSTEM_PROPERTIES
        .iter()
        .find(|known| known.eq_ignore_ascii_case(name))
        .map_or_else(|| name.to_owned(), |known| (*known).to_owned())
}

fn lookup(prop: &PropRef, subject: &dyn FilterSubject) -> Option<SqlValue> {
    match prop.scope {
        Scope::System => subject.system(&prop.name),
        Scope::User => subject.user(&prop.name),
    }
}

fn truth(v: &SqlValue) -> Option<bool> {
    match v {
        SqlValue::Bool(b) => Some(*b),
        _ => None,
    }
}

fn tri(v: Option<bool>) -> SqlValue {
    v.map_or(SqlValue::Null, SqlValue::Bool)
}

fn eval(expr: &Expr, s: &dyn FilterSubject) -> SqlValue {
    match expr {
        Expr::Const(v) => v.clone(),
        Expr::Prop(p) => lookup(p, s).unwrap_or(SqlValue::Null),
        Expr::PropertyFn(name) => match eval(name, s) {
            SqlValue::String(n) => lookup(&prop_from_string(&n), s).unwrap_or(SqlValue::Null),
            _ => SqlValue::Null,
        },
        Expr::Exists(p) => SqlValue::Bool(lookup(p, s).is_some()),
        Expr::Neg(e) => match eval(e, s) {
            SqlValue::Int(i) => i.checked_neg().map_or(SqlValue::Null, SqlValue::Int),
            SqlValue::Float(f) => SqlValue::Float(-f),
            _ => SqlValue::Null,
        },
        Expr::Plus(e) => match eval(e, s) {
            v @ (SqlValue::Int(_) | SqlValue::Float(_)) => v,
            _ => SqlValue::Null,
        },
        Expr::Not(e) => tri(truth(&eval(e, s)).map(|b| !b)),
        Expr::And(a, b) => {
            let l = truth(&eval(a, s));
            if l == Some(false) {
                return SqlValue::Bool(false);
            }
            match (l, truth(&eval(b, s))) {
                (_, Some(false)) => SqlValue::Bool(false),
                (Some(true), Some(true)) => SqlValue::Bool(true),
                _ => SqlValue::Null,
            }
        }
        Expr::Or(a, b) => {
            let l = truth(&eval(a, s));
            if l == Some(true) {
                return SqlValue::Bool(true);
            }
            match (l, truth(&eval(b, s))) {
                (_, Some(true)) => SqlValue::Bool(true),
                (Some(false), Some(false)) => SqlValue::Bool(false),
                _ => SqlValue::Null,
            }
        }
        Expr::Arith(op, a, b) => arith(*op, &eval(a, s), &eval(b, s)),
        Expr::Cmp(op, a, b) => compare(*op, &eval(a, s), &eval(b, s)),
        Expr::IsNull { expr, negated } => SqlValue::Bool(matches!(eval(expr, s), SqlValue::Null) != *negated),
        Expr::In { expr, list, negated } => {
            let v = eval(expr, s);
            if v == SqlValue::Null {
                return SqlValue::Null;
            }
            let mut unknown = false;
            let mut found = false;
            for item in list {
                match compare(CmpOp::Eq, &v, &eval(item, s)) {
                    SqlValue::Bool(true) => {
                        found = true;
                        break;
                    }
                    SqlValue::Bool(false) => {}
                    _ => unknown = true,
                }
            }
            if found {
                SqlValue::Bool(!*negated)
            } else if unknown {
                SqlValue::Null
            } else {
                SqlValue::Bool(*negated)
            }
        }
        Expr::Like {
            expr,
            pattern,
            escape,
            negated,
            compiled,
        } => {
            let SqlValue::String(text) = eval(expr, s) else {
                return SqlValue::Null;
            };
            let owned;
            let toks = match compiled {
                Some(t) => t,
                None => {
                    let SqlValue::String(pat) = eval(pattern, s) else {
                        return SqlValue::Null;
                    };
                    let esc = match escape {
                        None => None,
                        Some(e) => match eval(e, s) {
                            SqlValue::String(e) => match single_char(&e) {
                                Some(c) => Some(c),
                                None => return SqlValue::Null,
                            },
                            _ => return SqlValue::Null,
                        },
                    };
                    match compile_like(&pat, esc) {
                        Ok(t) => {
                            owned = t;
                            &owned
                        }
                        Err(_) => return SqlValue::Null,
                    }
                }
            };
            SqlValue::Bool(like_match(toks, &text) != *negated)
        }
    }
}

fn prop_from_string(name: &str) -> PropRef {
    let scoped = |prefix: &str| {
        name.get(..prefix.len())
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .map(|_| &name[prefix.len()..])
    };
    if let Some(rest) = scoped("sys.") {
        PropRef {
            scope: Scope::System,
            name: canonical_system_name(rest),
        }
    } else if let Some(rest) = scoped("user.") {
        PropRef {
            scope: Scope::User,
            name: rest.to_owned(),
        }
    } else {
        PropRef {
            scope: Scope::User,
            name: name.to_owned(),
        }
    }
}

fn single_char(s: &str) -> Option<char> {
    let mut it = s.chars();
    match (it.next(), it.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

fn compare(op: CmpOp, a: &SqlValue, b: &SqlValue) -> SqlValue {
    use SqlValue::*;
    let float_cmp = |x: f64, y: f64| match x.partial_cmp(&y) {
        Some(ord) => Bool(op.test(ord)),
        // NaN: every comparison is false except `<>`, as in C#.
        None => Bool(op == CmpOp::Ne),
    };
    match (a, b) {
        (Int(x), Int(y)) => Bool(op.test(x.cmp(y))),
        (Int(x), Float(y)) => float_cmp(*x as f64, *y),
        (Float(x), Int(y)) => float_cmp(*x, *y as f64),
        (Float(x), Float(y)) => float_cmp(*x, *y),
        (String(x), String(y)) => Bool(op.test(x.encode_utf16().cmp(y.encode_utf16()))),
        (Bool(x), Bool(y)) => match op {
            CmpOp::Eq => Bool(x == y),
            CmpOp::Ne => Bool(x != y),
            _ => Null,
        },
        // NULL / missing operands, and mismatched types: UNKNOWN.
        _ => Null,
    }
}

fn arith(op: ArithOp, a: &SqlValue, b: &SqlValue) -> SqlValue {
    use SqlValue::*;
    let float = |x: f64, y: f64| {
        Float(match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
            ArithOp::Div => x / y,
            ArithOp::Rem => x % y,
        })
    };
    match (a, b) {
        (Int(x), Int(y)) => {
            let r = match op {
                ArithOp::Add => x.checked_add(*y),
                ArithOp::Sub => x.checked_sub(*y),
                ArithOp::Mul => x.checked_mul(*y),
                ArithOp::Div => x.checked_div(*y),
                ArithOp::Rem => x.checked_rem(*y),
            };
            r.map_or(Null, Int)
        }
        (Int(x), Float(y)) => float(*x as f64, *y),
        (Float(x), Int(y)) => float(*x, *y as f64),
        (Float(x), Float(y)) => float(*x, *y),
        (String(x), String(y)) if op == ArithOp::Add => String(format!("{x}{y}")),
        _ => Null,
    }
}

fn compile_like(pattern: &str, escape: Option<char>) -> Result<Vec<LikeTok>, String> {
    let mut out = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(n) => out.push(LikeTok::Lit(n)),
                None => return Err("a character after the escape character".into()),
            }
        } else if c == '%' {
            if out.last() != Some(&LikeTok::AnySeq) {
                out.push(LikeTok::AnySeq);
            }
        } else if c == '_' {
            out.push(LikeTok::AnyOne);
        } else {
            out.push(LikeTok::Lit(c));
        }
    }
    Ok(out)
}

/// Wildcard match with single-point backtracking on the last `%`.
fn like_match(pat: &[LikeTok], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pat.get(p) {
            Some(LikeTok::AnySeq) => {
                star = Some((p, t));
                p += 1;
            }
            Some(LikeTok::AnyOne) => {
                p += 1;
                t += 1;
            }
            Some(LikeTok::Lit(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|tok| *tok == LikeTok::AnySeq)
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum TokKind {
    /// Regular identifier (may be a keyword).
    Ident(String),
    /// `[delimited]` or `"quoted"` identifier, never a keyword.
    Quoted(String),
    Str(String),
    Int(u64),
    Float(f64),
    LParen,
    RParen,
    Comma,
    Dot,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Eof,
}

impl TokKind {
    fn describe(&self) -> String {
        match self {
            TokKind::Ident(s) => format!("'{s}'"),
            TokKind::Quoted(s) => format!("identifier [{s}]"),
            TokKind::Str(s) => format!("string '{s}'"),
            TokKind::Int(i) => format!("number {i}"),
            TokKind::Float(f) => format!("number {f}"),
            TokKind::LParen => "'('".into(),
            TokKind::RParen => "')'".into(),
            TokKind::Comma => "','".into(),
            TokKind::Dot => "'.'".into(),
            TokKind::Eq => "'='".into(),
            TokKind::Ne => "'<>'".into(),
            TokKind::Lt => "'<'".into(),
            TokKind::Le => "'<='".into(),
            TokKind::Gt => "'>'".into(),
            TokKind::Ge => "'>='".into(),
            TokKind::Plus => "'+'".into(),
            TokKind::Minus => "'-'".into(),
            TokKind::Star => "'*'".into(),
            TokKind::Slash => "'/'".into(),
            TokKind::Percent => "'%'".into(),
            TokKind::Eof => "end of expression".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Tok {
    kind: TokKind,
    pos: usize,
}

fn lex(src: &str) -> Result<Vec<Tok>, FilterError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let simple = match c {
            '(' => Some((TokKind::LParen, 1)),
            ')' => Some((TokKind::RParen, 1)),
            ',' => Some((TokKind::Comma, 1)),
            '.' if !next.is_some_and(|n| n.is_ascii_digit()) => Some((TokKind::Dot, 1)),
            '=' => Some((TokKind::Eq, 1)),
            '<' if next == Some('>') => Some((TokKind::Ne, 2)),
            '<' if next == Some('=') => Some((TokKind::Le, 2)),
            '<' => Some((TokKind::Lt, 1)),
            '>' if next == Some('=') => Some((TokKind::Ge, 2)),
            '>' => Some((TokKind::Gt, 1)),
            '!' if next == Some('=') => Some((TokKind::Ne, 2)),
            '+' => Some((TokKind::Plus, 1)),
            '-' => Some((TokKind::Minus, 1)),
            '*' => Some((TokKind::Star, 1)),
            '/' => Some((TokKind::Slash, 1)),
            '%' => Some((TokKind::Percent, 1)),
            _ => None,
        };
        if let Some((kind, len)) = simple {
            toks.push(Tok { kind, pos: start });
            i += len;
            continue;
        }
        if c == '\'' {
            let (text, end) =
                read_delimited(&chars, i + 1, '\'').ok_or(FilterError::UnterminatedString { position: start })?;
            toks.push(Tok {
                kind: TokKind::Str(text),
                pos: start,
            });
            i = end;
        } else if c == '[' || c == '"' {
            let close = if c == '[' { ']' } else { '"' };
            let (text, end) = read_delimited(&chars, i + 1, close).ok_or(FilterError::UnterminatedIdentifier {
                position: start,
                expected: close,
            })?;
            toks.push(Tok {
                kind: TokKind::Quoted(text),
                pos: start,
            });
            i = end;
        } else if c.is_ascii_digit() || c == '.' {
            let (kind, end) = lex_number(&chars, i)?;
            toks.push(Tok { kind, pos: start });
            i = end;
        } else if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            toks.push(Tok {
                kind: TokKind::Ident(chars[start..i].iter().collect()),
                pos: start,
            });
        } else {
            return Err(FilterError::Syntax {
                position: start,
                expected: "a token".into(),
                found: format!("character '{c}'"),
            });
        }
    }
    toks.push(Tok {
        kind: TokKind::Eof,
        pos: chars.len(),
    });
    Ok(toks)
}

/// Reads up to the closing delimiter, where a doubled delimiter is a literal
/// one. Returns the text and the index after the closing delimiter.
fn read_delimited(chars: &[char], mut i: usize, close: char) -> Option<(String, usize)> {
    let mut out = String::new();
    while i < chars.len() {
        if chars[i] == close {
            if chars.get(i + 1) == Some(&close) {
                out.push(close);
                i += 2;
                continue;
            }
            return Some((out, i + 1));
        }
        out.push(chars[i]);
        i += 1;
    }
    None
}

fn lex_number(chars: &[char], start: usize) -> Result<(TokKind, usize), FilterError> {
    let digits = |mut i: usize| {
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut i = digits(start);
    let mut is_float = false;
    if chars.get(i) == Some(&'.') {
        is_float = true;
        i = digits(i + 1);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        is_float = true;
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        let end = digits(j);
        if end == j {
            let text: String = chars[start..end.max(i + 1)].iter().collect();
            return Err(FilterError::InvalidNumber {
                position: start,
                text,
                expected: "digits in the exponent".into(),
            });
        }
        i = end;
    }
    let text: String = chars[start..i].iter().collect();
    if chars
        .get(i)
        .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
    {
        return Err(FilterError::InvalidNumber {
            position: start,
            text: chars[start..=i].iter().collect(),
            expected: "an operator or whitespace after the number".into(),
        });
    }
    let kind = if is_float {
        text.parse::<f64>()
            .map(TokKind::Float)
            .map_err(|_| FilterError::InvalidNumber {
                position: start,
                text: text.clone(),
                expected: "a decimal or scientific number".into(),
            })?
    } else {
        text.parse::<u64>()
            .map(TokKind::Int)
            .map_err(|_| FilterError::InvalidNumber {
                position: start,
                text: text.clone(),
                expected: "an integer within the 64-bit range".into(),
            })?
    };
    Ok((kind, i))
}

// ---------------------------------------------------------------------------
// Parser

const RESERVED: &[&str] = &[
    "AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE",
];

/// Maximum nesting of parentheses, `NOT` and unary signs (guards the stack).
const MAX_NESTING: usize = 128;

struct Parser {
    tokens: Vec<Tok>,
    idx: usize,
    depth: usize,
}

impl Parser {
    /// Enters one nesting level; pair with `self.depth -= 1`.
    fn enter(&mut self) -> Result<(), FilterError> {
        if self.depth >= MAX_NESTING {
            return self.error("at most 128 levels of nesting");
        }
        self.depth += 1;
        Ok(())
    }

    fn peek(&self) -> &Tok {
        self.peek_at(0)
    }

    fn peek_at(&self, n: usize) -> &Tok {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[(self.idx + n).min(last)]
    }

    fn bump(&mut self) -> Tok {
        let tok = self.peek().clone();
        if self.idx < self.tokens.len() {
            self.idx += 1;
        }
        tok
    }

    fn is_kw_at(&self, n: usize, kw: &str) -> bool {
        matches!(&self.peek_at(n).kind, TokKind::Ident(s) if s.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw_at(0, kw) {
            self.idx += 1;
            true
        } else {
            false
        }
    }

    fn error<T>(&self, expected: &str) -> Result<T, FilterError> {
        let tok = self.peek();
        Err(FilterError::Syntax {
            position: tok.pos,
            expected: expected.into(),
            found: tok.kind.describe(),
        })
    }

    fn expect(&mut self, kind: TokKind, expected: &str) -> Result<Tok, FilterError> {
        if self.peek().kind == kind {
            Ok(self.bump())
        } else {
            self.error(expected)
        }
    }

    fn parse_or(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_and()?;
        while self.eat_kw("OR") {
            let right = self.parse_and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_and(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_not()?;
        while self.eat_kw("AND") {
            let right = self.parse_not()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_not(&mut self) -> Result<Expr, FilterError> {
        if self.is_kw_at(0, "NOT") {
            self.enter()?;
            self.bump();
            let inner = self.parse_not()?;
            self.depth -= 1;
            Ok(Expr::Not(Box::new(inner)))
        } else {
            self.parse_predicate()
        }
    }

    fn parse_predicate(&mut self) -> Result<Expr, FilterError> {
        let left = self.parse_additive()?;
        let cmp = match self.peek().kind {
            TokKind::Eq => Some(CmpOp::Eq),
            TokKind::Ne => Some(CmpOp::Ne),
            TokKind::Lt => Some(CmpOp::Lt),
            TokKind::Le => Some(CmpOp::Le),
            TokKind::Gt => Some(CmpOp::Gt),
            TokKind::Ge => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(op) = cmp {
            self.bump();
            let right = self.parse_additive()?;
            return Ok(Expr::Cmp(op, Box::new(left), Box::new(right)));
        }
        if self.eat_kw("IS") {
            let negated = self.eat_kw("NOT");
            if !self.eat_kw("NULL") {
                return self.error(if negated { "NULL" } else { "NULL or NOT NULL" });
            }
            return Ok(Expr::IsNull {
                expr: Box::new(left),
                negated,
            });
        }
        let negated = if self.is_kw_at(0, "NOT") && (self.is_kw_at(1, "IN") || self.is_kw_at(1, "LIKE")) {
            self.bump();
            true
        } else {
            false
        };
        if self.eat_kw("IN") {
            self.expect(TokKind::LParen, "'(' after IN")?;
            let mut list = vec![self.parse_additive()?];
            loop {
                match self.peek().kind {
                    TokKind::Comma => {
                        self.bump();
                        list.push(self.parse_additive()?);
                    }
                    TokKind::RParen => {
                        self.bump();
                        break;
                    }
                    _ => return self.error("',' or ')' in IN list"),
                }
            }
            return Ok(Expr::In {
                expr: Box::new(left),
                list,
                negated,
            });
        }
        if self.eat_kw("LIKE") {
            return self.parse_like_rest(left, negated);
        }
        Ok(left)
    }

    fn parse_like_rest(&mut self, left: Expr, negated: bool) -> Result<Expr, FilterError> {
        let pattern_pos = self.peek().pos;
        let pattern = self.parse_additive()?;
        let mut escape = None;
        let mut escape_pos = 0;
        if self.eat_kw("ESCAPE") {
            escape_pos = self.peek().pos;
            escape = Some(self.parse_additive()?);
        }
        let const_escape = match &escape {
            None => Some(None),
            Some(Expr::Const(SqlValue::String(e))) => match single_char(e) {
                Some(c) => Some(Some(c)),
                None => {
                    return Err(FilterError::InvalidLike {
                        position: escape_pos,
                        expected: "an ESCAPE string of exactly one character".into(),
                    });
                }
            },
            Some(Expr::Const(_)) => {
                return Err(FilterError::InvalidLike {
                    position: escape_pos,
                    expected: "a string ESCAPE character".into(),
                });
            }
            Some(_) => None,
        };
        let compiled = match (&pattern, const_escape) {
            (Expr::Const(SqlValue::String(p)), Some(esc)) => {
                Some(compile_like(p, esc).map_err(|expected| FilterError::InvalidLike {
                    position: pattern_pos,
                    expected,
                })?)
            }
            (Expr::Const(v), _) if !matches!(v, SqlValue::String(_)) => {
                return Err(FilterError::InvalidLike {
                    position: pattern_pos,
                    expected: "a string pattern".into(),
                });
            }
            _ => None,
        };
        Ok(Expr::Like {
            expr: Box::new(left),
            pattern: Box::new(pattern),
            escape: escape.map(Box::new),
            negated,
            compiled,
        })
    }

    fn parse_additive(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_multiplicative()?;
        loop {
            let op = match self.peek().kind {
                TokKind::Plus => ArithOp::Add,
                TokKind::Minus => ArithOp::Sub,
                _ => return Ok(left),
            };
            self.bump();
            let right = self.parse_multiplicative()?;
            left = Expr::Arith(op, Box::new(left), Box::new(right));
        }
    }

    fn parse_multiplicative(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.parse_unary()?;
        loop {
            let op = match self.peek().kind {
                TokKind::Star => ArithOp::Mul,
                TokKind::Slash => ArithOp::Div,
                TokKind::Percent => ArithOp::Rem,
                _ => return Ok(left),
            };
            self.bump();
            let right = self.parse_unary()?;
            left = Expr::Arith(op, Box::new(left), Box::new(right));
        }
    }

    fn parse_unary(&mut self) -> Result<Expr, FilterError> {
        match self.peek().kind {
            TokKind::Minus => {
                self.enter()?;
                self.bump();
                // `-9223372036854775808` is representable only when folded.
                if let TokKind::Int(n) = self.peek().kind
                    && n == 1u64 << 63
                {
                    self.bump();
                    self.depth -= 1;
                    return Ok(Expr::Const(SqlValue::Int(i64::MIN)));
                }
                let inner = self.parse_unary()?;
                self.depth -= 1;
                Ok(Expr::Neg(Box::new(inner)))
            }
            TokKind::Plus => {
                self.enter()?;
                self.bump();
                let inner = self.parse_unary()?;
                self.depth -= 1;
                Ok(Expr::Plus(Box::new(inner)))
            }
            _ => self.parse_primary(),
        }
    }

    fn parse_primary(&mut self) -> Result<Expr, FilterError> {
        const EXPECTED: &str = "an expression (constant, property, or '(')";
        let tok = self.peek().clone();
        match tok.kind {
            TokKind::LParen => {
                self.enter()?;
                self.bump();
                let inner = self.parse_or()?;
                self.expect(TokKind::RParen, "')'")?;
                self.depth -= 1;
                Ok(inner)
            }
            TokKind::Str(s) => {
                self.bump();
                Ok(Expr::Const(SqlValue::String(s)))
            }
            TokKind::Float(f) => {
                self.bump();
                Ok(Expr::Const(SqlValue::Float(f)))
            }
            TokKind::Int(n) => match i64::try_from(n) {
                Ok(v) => {
                    self.bump();
                    Ok(Expr::Const(SqlValue::Int(v)))
                }
                Err(_) => Err(FilterError::InvalidNumber {
                    position: tok.pos,
                    text: n.to_string(),
                    expected: "an integer within the 64-bit signed range".into(),
                }),
            },
            TokKind::Quoted(name) => {
                self.bump();
                Ok(Expr::Prop(PropRef {
                    scope: Scope::User,
                    name,
                }))
            }
            TokKind::Ident(ref word) => {
                if word.eq_ignore_ascii_case("TRUE") {
                    self.bump();
                    return Ok(Expr::Const(SqlValue::Bool(true)));
                }
                if word.eq_ignore_ascii_case("FALSE") {
                    self.bump();
                    return Ok(Expr::Const(SqlValue::Bool(false)));
                }
                if word.eq_ignore_ascii_case("NULL") {
                    self.bump();
                    return Ok(Expr::Const(SqlValue::Null));
                }
                if word.eq_ignore_ascii_case("EXISTS") {
                    self.bump();
                    self.expect(TokKind::LParen, "'(' after EXISTS")?;
                    let prop = self.parse_property()?;
                    self.expect(TokKind::RParen, "')'")?;
                    return Ok(Expr::Exists(prop));
                }
                if RESERVED.iter().any(|k| k.eq_ignore_ascii_case(word)) {
                    return self.error(EXPECTED);
                }
                if self.peek_at(1).kind == TokKind::LParen {
                    if word.eq_ignore_ascii_case("property") {
                        self.bump();
                        self.bump();
                        let arg = self.parse_additive()?;
                        self.expect(TokKind::RParen, "')'")?;
                        return Ok(Expr::PropertyFn(Box::new(arg)));
                    }
                    return self.error("a known function (property)");
                }
                Ok(Expr::Prop(self.parse_property()?))
            }
            _ => self.error(EXPECTED),
        }
    }

    fn parse_property(&mut self) -> Result<PropRef, FilterError> {
        const EXPECTED: &str = "a property name";
        let tok = self.peek().clone();
        match tok.kind {
            TokKind::Quoted(name) => {
                self.bump();
                Ok(PropRef {
                    scope: Scope::User,
                    name,
                })
            }
            TokKind::Ident(word) => {
                let scope = if word.eq_ignore_ascii_case("sys") {
                    Some(Scope::System)
                } else if word.eq_ignore_ascii_case("user") {
                    Some(Scope::User)
                } else {
                    None
                };
                match scope {
                    Some(scope) if self.peek_at(1).kind == TokKind::Dot => {
                        self.bump();
                        self.bump();
                        let name = match self.peek().kind.clone() {
                            // Keywords are allowed after a scope: `user.not`.
                            TokKind::Ident(n) | TokKind::Quoted(n) => {
                                self.bump();
                                n
                            }
                            _ => return self.error("a property name after the scope"),
                        };
                        let name = match scope {
                            Scope::System => canonical_system_name(&name),
                            Scope::User => name,
                        };
                        Ok(PropRef { scope, name })
                    }
                    _ => {
                        if RESERVED.iter().any(|k| k.eq_ignore_ascii_case(&word)) {
                            return self.error(EXPECTED);
                        }
                        self.bump();
                        Ok(PropRef {
                            scope: Scope::User,
                            name: word,
                        })
                    }
                }
            }
            _ => self.error(EXPECTED),
        }
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests;
