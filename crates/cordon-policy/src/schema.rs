//! The schema language: each table of a policy file is declared once, with
//! [`raw_table!`](crate::raw_table), as a serde struct whose fields carry their shape. The
//! declaration yields both the struct serde fills and a [`Table`] description, and the
//! [`Checker`] walks a parsed file against those descriptions, reporting the first unknown key,
//! wrong type, missing key or invalid choice in file order — with line, column and a
//! did-you-mean — before serde sees the file. Nothing here names a policy key.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::{Diagnostic, backticked, did_you_mean};

/// What a value must be.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// A string.
    String,
    /// An integer.
    Integer,
    /// An integer or a float.
    Number,
    /// `true` or `false`.
    Boolean,
    /// An integer of bytes or a string such as `"4G"`.
    Size,
    /// An array of strings.
    Strings,
    /// An array of integers.
    Integers,
    /// A table whose values are strings.
    StringTable,
    /// A string or an array of strings.
    StringOrStrings,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A sub-table.
    Table(&'static Table),
    /// An array of tables (`[[x.y]]`).
    Tables(&'static Table),
    /// A table of named tables (`[x.NAME]`).
    Map(&'static Table),
}

impl Shape {
    fn describe(self) -> &'static str {
        match self {
            Shape::String | Shape::Choice(_) => "a string",
            Shape::Integer => "an integer",
            Shape::Number => "a number",
            Shape::Boolean => "a boolean",
            Shape::Size => "an integer of bytes or a string such as \"4G\"",
            Shape::Strings => "an array of strings",
            Shape::Integers => "an array of integers",
            Shape::StringTable | Shape::Table(_) | Shape::Map(_) => "a table",
            Shape::StringOrStrings => "a string or an array of strings",
            Shape::Tables(_) => "an array of tables",
        }
    }
}

/// One key of a table.
#[derive(Debug)]
pub(crate) struct Field {
    /// The key as written.
    pub key: &'static str,
    /// What its value must be.
    pub shape: Shape,
    /// Whether the table must have it.
    pub required: bool,
    /// A shorthand: accepted as written, rendered in the general form (`[exec] deny = […]`
    /// becomes `[[exec.rule]]` entries). Read by the wiring test, which requires every other
    /// key to be rendered.
    #[cfg_attr(not(test), allow(dead_code))]
    pub shorthand: bool,
    /// An example shown when the value has the wrong type (empty: a generic one). The
    /// template writes it for `cordon init`, so it must be valid policy; one that loosens the
    /// built-in policy is only on a key flagged `[loosens]`.
    pub example: &'static str,
    /// The key exists to loosen the built-in policy (its example does): the template and the
    /// reference say so, since such a line runs only after `cordon trust`.
    pub loosens: bool,
    /// What the key does, from its doc comment (one line each).
    pub doc: &'static [&'static str],
}

/// One table of the schema: a section, or the element of an array of tables.
#[derive(Debug)]
pub(crate) struct Table {
    /// Its keys, in the order they are documented and rendered.
    pub fields: &'static [Field],
    /// A short example of a complete entry, for help lines.
    pub example: &'static str,
}

impl Table {
    /// The keys, in declaration order.
    pub(crate) fn keys(&self) -> Vec<&'static str> {
        self.fields.iter().map(|f| f.key).collect()
    }

    fn field(&self, key: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.key == key)
    }
}

/// A serde struct declared with [`raw_table!`](crate::raw_table): its schema.
pub(crate) trait Schema {
    /// The table's description.
    const TABLE: Table;
}

/// A plan enum written in policy files as one of a fixed set of strings.
pub trait Choice: Copy + 'static {
    /// The strings, in declaration order.
    const NAMES: &'static [&'static str];
    /// This value as written in policy files.
    fn name(self) -> &'static str;
}

/// Declares a plan enum written as a string in policy files: serde names, [`Choice`] and
/// `Display` all come from the one list.
#[macro_export]
#[doc(hidden)]
macro_rules! choice {
    ($(#[$m:meta])* pub enum $E:ident { $($(#[$vm:meta])* $V:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $E { $($(#[$vm])* #[serde(rename = $s)] $V),* }
        impl $crate::schema::Choice for $E {
            const NAMES: &'static [&'static str] = &[$($s),*];
            fn name(self) -> &'static str {
                match self { $(Self::$V => $s),* }
            }
        }
        impl std::fmt::Display for $E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::schema::Choice::name(*self))
            }
        }
    };
}

/// The Rust type serde fills for a field of a given shape. Every field is optional to serde:
/// the [`Checker`] has already reported a missing required key with its location.
#[macro_export]
#[doc(hidden)]
macro_rules! field_ty {
    (String) => { Option<serde_spanned::Spanned<String>> };
    (Integer) => { Option<serde_spanned::Spanned<i64>> };
    (Number) => { Option<serde_spanned::Spanned<f64>> };
    (Boolean) => { Option<serde_spanned::Spanned<bool>> };
    (Size) => { Option<serde_spanned::Spanned<$crate::schema::Size>> };
    (Strings) => { Vec<serde_spanned::Spanned<String>> };
    (Integers) => { Option<serde_spanned::Spanned<Vec<serde_spanned::Spanned<i64>>>> };
    (StringTable) => {
        std::collections::BTreeMap<serde_spanned::Spanned<String>, serde_spanned::Spanned<String>>
    };
    (StringOrStrings) => { Option<serde_spanned::Spanned<$crate::schema::OneOrMany>> };
    (Choice($T:ty $(, $($only:literal),*)?)) => { Option<serde_spanned::Spanned<$T>> };
    (Table($T:ty)) => { Option<serde_spanned::Spanned<$T>> };
    (Tables($T:ty)) => { Vec<serde_spanned::Spanned<$T>> };
    (Map($T:ty)) => {
        std::collections::BTreeMap<serde_spanned::Spanned<String>, serde_spanned::Spanned<$T>>
    };
}

/// The [`Shape`] of a field.
#[macro_export]
#[doc(hidden)]
macro_rules! field_shape {
    (Choice($T:ty)) => {
        $crate::schema::Shape::Choice(<$T as $crate::schema::Choice>::NAMES)
    };
    (Choice($T:ty, $($only:literal),+)) => { $crate::schema::Shape::Choice(&[$($only),+]) };
    (Table($T:ty)) => { $crate::schema::Shape::Table(&<$T as $crate::schema::Schema>::TABLE) };
    (Tables($T:ty)) => { $crate::schema::Shape::Tables(&<$T as $crate::schema::Schema>::TABLE) };
    (Map($T:ty)) => { $crate::schema::Shape::Map(&<$T as $crate::schema::Schema>::TABLE) };
    ($shape:ident) => { $crate::schema::Shape::$shape };
}

/// Declares one table of the schema: the serde struct and its [`Schema`]. A field is
/// `/// what it does` then `name: Shape`, optionally flagged `[required]`, `[shorthand]`
/// and/or `[loosens]` (comma-separated), optionally followed by `= "example"` for help lines
/// and the template.
#[macro_export]
#[doc(hidden)]
macro_rules! raw_table {
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident example $example:literal {
            $(
                $(#[doc = $doc:literal])*
                $field:ident : $shape:ident $(($($arg:tt)*))? $([$($flag:ident),+])? $(= $ex:literal)?
            ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        $vis struct $name {
            $($(#[doc = $doc])* pub $field: $crate::field_ty!($shape $(($($arg)*))?),)*
        }
        impl $crate::schema::Schema for $name {
            const TABLE: $crate::schema::Table = $crate::schema::Table {
                example: $example,
                fields: &[$($crate::schema::Field {
                    key: $crate::schema::unraw(stringify!($field)),
                    shape: $crate::field_shape!($shape $(($($arg)*))?),
                    required: $crate::flag!(required; $($($flag),+)?),
                    shorthand: $crate::flag!(shorthand; $($($flag),+)?),
                    loosens: $crate::flag!(loosens; $($($flag),+)?),
                    example: concat!("" $(, $ex)?),
                    doc: &[$($doc),*],
                }),*],
            };
        }
    };
}

/// A field's key as written in policy files: its name without `r#`, which a key that is a Rust
/// keyword (`for`) needs as a field (serde drops it too).
pub(crate) const fn unraw(name: &'static str) -> &'static str {
    match name.as_bytes() {
        [b'r', b'#', rest @ ..] => match std::str::from_utf8(rest) {
            Ok(key) => key,
            Err(_) => name,
        },
        _ => name,
    }
}

/// Whether a field's flags (`[required, loosens]`) include `$want`.
#[macro_export]
#[doc(hidden)]
macro_rules! flag {
    ($want:ident; ) => {
        false
    };
    ($want:ident; $first:ident $(, $rest:ident)*) => {
        $crate::flag!(@is $want $first) || $crate::flag!($want; $($rest),*)
    };
    (@is required required) => {
        true
    };
    (@is shorthand shorthand) => {
        true
    };
    (@is loosens loosens) => {
        true
    };
    (@is $want:ident $other:ident) => {
        false
    };
}

/// A string or an array of strings (located as a whole).
#[derive(Debug)]
pub(crate) struct OneOrMany(pub Vec<String>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany(vec![v.to_string()]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(OneOrMany(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A memory size as written: an integer of bytes or a string such as `"4G"`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Size {
    Bytes(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer of bytes or a string such as \"4G\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                Ok(Size::Bytes(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size::Bytes(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                Ok(Size::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A top-level entry of a policy file: a section, and whether profiles may have it.
#[derive(Debug)]
pub(crate) struct Root {
    /// Sections in documentation order: `(name, shape, allowed in a profile)`.
    pub sections: &'static [(&'static str, Shape, bool)],
}

impl Root {
    fn names(&self, in_profile: bool) -> Vec<&'static str> {
        let mut v: Vec<_> = self
            .sections
            .iter()
            .filter(|s| s.2 || !in_profile)
            .map(|s| s.0)
            .collect();
        if !in_profile {
            v.push("profile");
        }
        v
    }

    fn headers(&self) -> String {
        let mut out: Vec<String> = self
            .sections
            .iter()
            .map(|(name, shape, _)| match shape {
                Shape::Tables(_) => format!("[[{name}]]"),
                Shape::Map(_) => format!("[{name}.NAME]"),
                _ => format!("[{name}]"),
            })
            .collect();
        out.push("[profile.NAME]".to_string());
        let last = out.pop().unwrap_or_default();
        format!("{} and {last}", out.join(", "))
    }
}

fn a_type(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Walks the parsed tree of one policy file and reports the first problem, in file order.
pub(crate) struct Checker<'a> {
    pub src: &'a str,
    pub file: Option<&'a Path>,
    pub root: &'a Root,
}

type Entry<'t, 'i> = (
    &'t Spanned<toml::de::DeString<'i>>,
    &'t Spanned<DeValue<'i>>,
);

fn sorted<'t, 'i>(t: &'t DeTable<'i>) -> Vec<Entry<'t, 'i>> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// `x.y` as the path of a table inside `parent` (which may be empty).
fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

impl Checker<'_> {
    fn diag(&self, message: String, span: std::ops::Range<usize>, help: String) -> Diagnostic {
        Diagnostic::new(message)
            .in_file(self.file)
            .at(self.src, span)
            .with_help(help)
    }

    /// Checks a whole file.
    pub(crate) fn check(&self, root: &DeTable<'_>) -> Result<(), Diagnostic> {
        self.sections(root, "", false)
    }

    fn sections(&self, t: &DeTable<'_>, parent: &str, in_profile: bool) -> Result<(), Diagnostic> {
        let within = if parent.is_empty() {
            "the top level".to_string()
        } else {
            format!("[{parent}]")
        };
        for (k, v) in sorted(t) {
            let key: &str = k.get_ref();
            let found = self.root.sections.iter().find(|s| s.0 == key);
            match found {
                Some((name, shape, allowed)) if *allowed || !in_profile => {
                    self.value(name, v, &within, parent, *shape, "")?;
                }
                None if key == "profile" && !in_profile => {
                    let profiles = self.table(key, v, &within)?;
                    for (name, pv) in sorted(profiles) {
                        let name: &str = name.get_ref();
                        let path = format!("profile.{}", quote_key(name));
                        let pt = self.table(&format!("[{path}]"), pv, "[profile]")?;
                        self.sections(pt, &path, true)?;
                    }
                }
                _ if in_profile => {
                    return Err(self.unknown(key, k.span(), &within, &self.root.names(true)));
                }
                _ => {
                    let mut help = format!(
                        "cordon has only the sections {}; a section exists only where something enforces it",
                        self.root.headers()
                    );
                    if let Some(s) = did_you_mean(key, &self.root.names(false)) {
                        help.push_str(&format!("; did you mean `{s}`?"));
                    }
                    return Err(self.diag(format!("unknown section `{key}`"), k.span(), help));
                }
            }
        }
        Ok(())
    }

    fn unknown(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        section: &str,
        expected: &[&str],
    ) -> Diagnostic {
        let mut help = format!("expected one of {}", backticked(expected));
        if let Some(s) = did_you_mean(key, expected) {
            help.push_str(&format!("; did you mean `{s}`?"));
        }
        self.diag(format!("unknown key `{key}` in {section}"), span, help)
    }

    fn table<'t, 'i>(
        &self,
        key: &str,
        v: &'t Spanned<DeValue<'i>>,
        within: &str,
    ) -> Result<&'t DeTable<'i>, Diagnostic> {
        match v.get_ref() {
            DeValue::Table(t) => Ok(t),
            other => Err(self.diag(
                format!(
                    "`{key}` in {within} must be a table, found {}",
                    a_type(other)
                ),
                v.span(),
                format!(
                    "write it as a section header: [{}]",
                    key.trim_matches(['[', ']'])
                ),
            )),
        }
    }

    /// The keys of one table at `path` (shown as `header`).
    fn fields(
        &self,
        schema: &Table,
        t: &DeTable<'_>,
        path: &str,
        header: &str,
        at: std::ops::Range<usize>,
    ) -> Result<(), Diagnostic> {
        for (k, v) in sorted(t) {
            let key: &str = k.get_ref();
            let Some(field) = schema.field(key) else {
                return Err(self.unknown(key, k.span(), header, &schema.keys()));
            };
            self.value(key, v, header, path, field.shape, field.example)?;
        }
        for f in schema.fields.iter().filter(|f| f.required) {
            if !t.iter().any(|(k, _)| k.get_ref() == f.key) {
                return Err(self.diag(
                    format!("{header} has no `{}`", f.key),
                    at,
                    format!(
                        "e.g. {}",
                        if f.example.is_empty() {
                            schema.example
                        } else {
                            f.example
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    fn value(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        header: &str,
        parent: &str,
        shape: Shape,
        example: &str,
    ) -> Result<(), Diagnostic> {
        let ok = match (shape, v.get_ref()) {
            (Shape::String, DeValue::String(_))
            | (Shape::Integer, DeValue::Integer(_))
            | (Shape::Number, DeValue::Integer(_) | DeValue::Float(_))
            | (Shape::Boolean, DeValue::Boolean(_))
            | (Shape::Size, DeValue::Integer(_) | DeValue::String(_))
            | (Shape::StringOrStrings, DeValue::String(_)) => true,
            (Shape::Choice(values), DeValue::String(s)) => {
                return self.choice(key, header, s, v.span(), values);
            }
            (Shape::Table(schema), DeValue::Table(t)) => {
                let path = join(parent, key);
                return self.fields(schema, t, &path, &format!("[{path}]"), v.span());
            }
            (Shape::Map(schema), DeValue::Table(t)) => {
                for (name, item) in sorted(t) {
                    let path = format!("{}.{}", join(parent, key), quote_key(name.get_ref()));
                    let header = format!("[{path}]");
                    let within = format!("[{}]", join(parent, key));
                    let it = self.table(&header, item, &within)?;
                    self.fields(schema, it, &path, &header, item.span())?;
                }
                return Ok(());
            }
            (Shape::Tables(schema), DeValue::Array(items)) => {
                let path = join(parent, key);
                let item_header = format!("[[{path}]]");
                for item in items.iter() {
                    let DeValue::Table(t) = item.get_ref() else {
                        return Err(self.diag(
                            format!(
                                "elements of `{key}` in {header} must be tables, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            format!(
                                "write each as a {item_header} section, e.g. {}",
                                schema.example
                            ),
                        ));
                    };
                    self.fields(schema, t, &path, &item_header, item.span())?;
                }
                return Ok(());
            }
            (Shape::Strings | Shape::StringOrStrings, DeValue::Array(items)) => {
                self.elements(key, header, items, "strings", "quote it: \"...\"", |v| {
                    matches!(v, DeValue::String(_))
                })?;
                true
            }
            (Shape::Integers, DeValue::Array(items)) => {
                self.elements(
                    key,
                    header,
                    items,
                    "integers",
                    "write port numbers without quotes, e.g. ports = [443]",
                    |v| matches!(v, DeValue::Integer(_)),
                )?;
                true
            }
            (Shape::StringTable, DeValue::Table(t)) => {
                for (k, item) in sorted(t) {
                    if !matches!(item.get_ref(), DeValue::String(_)) {
                        let k: &str = k.get_ref();
                        return Err(self.diag(
                            format!(
                                "`{k}` in {header} `{key}` must be a string, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            "quote the value: \"...\"".to_string(),
                        ));
                    }
                }
                true
            }
            (Shape::Table(_) | Shape::Map(_), _) => {
                self.table(key, v, header)?;
                true
            }
            _ => false,
        };
        if ok {
            return Ok(());
        }
        Err(self.diag(
            format!(
                "`{key}` in {header} must be {}, found {}",
                shape.describe(),
                a_type(v.get_ref())
            ),
            v.span(),
            type_help(key, shape, v.get_ref(), example),
        ))
    }

    fn elements(
        &self,
        key: &str,
        header: &str,
        items: &[Spanned<DeValue<'_>>],
        what: &str,
        help: &str,
        ok: impl Fn(&DeValue<'_>) -> bool,
    ) -> Result<(), Diagnostic> {
        match items.iter().find(|i| !ok(i.get_ref())) {
            Some(item) => Err(self.diag(
                format!(
                    "elements of `{key}` in {header} must be {what}, found {}",
                    a_type(item.get_ref())
                ),
                item.span(),
                help.to_string(),
            )),
            None => Ok(()),
        }
    }

    fn choice(
        &self,
        key: &str,
        header: &str,
        got: &str,
        span: std::ops::Range<usize>,
        values: &[&str],
    ) -> Result<(), Diagnostic> {
        if values.contains(&got) {
            return Ok(());
        }
        let mut help = format!("expected {}", quoted_choices(values));
        let folded = got.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let suggestion = values
            .iter()
            .find(|x| x.replace(['-', '_'], "") == folded)
            .copied()
            .or_else(|| did_you_mean(&folded, values));
        if let Some(s) = suggestion {
            help.push_str(&format!("; did you mean \"{s}\"?"));
        }
        Err(self.diag(
            format!("invalid value {} for `{key}` in {header}", toml_string(got)),
            span,
            help,
        ))
    }
}

/// How to write a value of `shape` instead of the `found` one.
fn type_help(key: &str, shape: Shape, found: &DeValue<'_>, example: &str) -> String {
    match (shape, found) {
        // A TOML date-time (`until = 2026-12-31T18:00:00Z`): the same text, quoted.
        (Shape::String, DeValue::Datetime(d)) => format!("quote it: {key} = \"{d}\""),
        (Shape::String, _) if !example.is_empty() => format!("e.g. {example}"),
        (Shape::Strings, DeValue::String(s)) => {
            format!("write it as an array: {key} = [{}]", toml_string(s))
        }
        (Shape::Strings, _) => format!("write it as an array: {key} = [\"...\"]"),
        (Shape::StringTable, _) => format!("write it as a table: {key} = {{ NAME = \"value\" }}"),
        (Shape::Choice(values), _) => format!("expected {}", quoted_choices(values)),
        (Shape::Tables(t), _) => {
            format!("write each as a [[...{key}]] section, e.g. {}", t.example)
        }
        (Shape::Integers, _) => format!("write it as an array: {key} = [443]"),
        (Shape::Boolean, _) => format!("write true or false, without quotes: {key} = false"),
        (Shape::Size, _) => format!("e.g. {key} = \"4G\" or {key} = 4294967296"),
        // Only a number is a hint for a number: `pids = "many"` unquoted is still wrong.
        (Shape::Integer, DeValue::String(s)) if s.trim().parse::<i64>().is_ok() => {
            format!("remove the quotes: {key} = {}", s.trim())
        }
        (Shape::Number, DeValue::String(s))
            if s.trim().parse::<f64>().is_ok_and(f64::is_finite) =>
        {
            format!("remove the quotes: {key} = {}", s.trim())
        }
        (Shape::Integer | Shape::Number, _) => {
            let what = match (shape, found) {
                (Shape::Integer, DeValue::String(_)) => "a whole number, without quotes",
                (Shape::Integer, _) => "a whole number",
                (_, DeValue::String(_)) => "a number, without quotes",
                _ => "a number",
            };
            match example {
                "" => format!("write {what}"),
                e => format!("write {what}, e.g. {e}"),
            }
        }
        _ => format!("`{key}` must be {}", shape.describe()),
    }
}

/// `s` as a TOML string, as `toml` renders one (`toml::Value::String(s).to_string()`), but
/// through the writer `toml` uses rather than its serializer: rendering a plan writes a few
/// hundred of these, and the serializer's document per string was most of the render.
pub(crate) fn toml_string(s: &str) -> String {
    use toml_writer::ToTomlValue as _;
    s.to_toml_value()
}

/// `"a", "b" or "c"`.
pub(crate) fn quoted_choices(values: &[&str]) -> String {
    let q: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    match q.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `name` as a TOML key: bare when possible, quoted otherwise.
pub(crate) fn quote_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        toml_string(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The help line the checker gives for `doc`.
    fn help(doc: &str) -> String {
        let table = DeTable::parse(doc).unwrap();
        let root = &crate::sections::ROOT;
        let d = Checker {
            src: doc,
            file: None,
            root,
        }
        .check(table.get_ref())
        .expect_err(doc);
        d.help.unwrap_or_default()
    }

    #[test]
    fn a_number_hint_is_a_value_that_passes() {
        // Unquoted, "many" is still not a number: the hint gives one from the schema.
        let h = help("[limits]\npids = \"many\"\n");
        assert!(!h.contains("pids = many"), "{h}");
        assert!(h.contains("pids = 1024"), "{h}");
        let h = help("[limits]\ncpu = \"fast\"\n");
        assert!(h.contains("cpu = 2.0"), "{h}");
        // A quoted number: its own value, unquoted.
        assert_eq!(
            help("[limits]\npids = \" 512 \"\n"),
            "remove the quotes: pids = 512"
        );
        assert_eq!(
            help("[limits]\ncpu = \"1.5\"\n"),
            "remove the quotes: cpu = 1.5"
        );
        assert!(help("[exec]\nask_timeout = \"1m\"\n").contains("ask_timeout = 120"));
        assert!(help("[limits]\npids = 1.5\n").contains("a whole number, e.g. pids = 1024"));
    }

    /// Every integer and number key has an example for its hint (and `cordon init`, whose
    /// test proves each example valid); without one the hint could only guess.
    #[test]
    fn every_number_key_has_an_example() {
        fn walk(path: &str, t: &Table) {
            for f in t.fields {
                match f.shape {
                    Shape::Integer | Shape::Number | Shape::Size | Shape::Integers => {
                        assert!(
                            f.example.starts_with(&format!("{} = ", f.key)),
                            "{path}.{}: no example",
                            f.key
                        );
                        let h = type_help(f.key, f.shape, &DeValue::Boolean(true), f.example);
                        assert!(h.contains(&format!("{} = ", f.key)), "{h}");
                    }
                    Shape::Table(st) | Shape::Tables(st) | Shape::Map(st) => {
                        walk(&format!("{path}.{}", f.key), st)
                    }
                    _ => {}
                }
            }
        }
        for (name, shape, _) in crate::sections::ROOT.sections {
            if let Shape::Table(t) | Shape::Tables(t) | Shape::Map(t) = shape {
                walk(name, t);
            }
        }
    }

    #[test]
    fn integer_sizes_deserialize() {
        #[derive(Deserialize)]
        struct T {
            m: Size,
        }
        let t: T = toml::from_str("m = 1024").unwrap();
        assert_eq!(t.m, Size::Bytes(1024));
        let t: T = toml::from_str("m = \"4G\"").unwrap();
        assert_eq!(t.m, Size::Text("4G".into()));
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_key("claude"), "claude");
        assert_eq!(quote_key("a b"), "\"a b\"");
        for s in ["a\"b\\", "it's", "x\ny", "plain"] {
            let doc = format!("k = {}", toml_string(s));
            let t: toml::Table = toml::from_str(&doc).unwrap();
            assert_eq!(t["k"].as_str(), Some(s));
        }
        assert_eq!(toml_string("maybe"), "\"maybe\"");
        // The same text `toml` gives, quotes, escapes and all.
        for s in [
            "",
            "plain",
            "it's",
            "say \"hi\"",
            "both ' and \"",
            "back\\slash",
            "tab\tnew\nline",
            "\u{1}\u{7f}",
            "ünïcödé ✓",
            "~/.config/x",
        ] {
            assert_eq!(
                toml_string(s),
                toml::Value::String(s.into()).to_string(),
                "{s:?}"
            );
        }
        assert_eq!(quoted_choices(&["a"]), "\"a\"");
        assert_eq!(quoted_choices(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
