//! ROS 2 message definitions in the `ros2msg` text rosbag2 stores as an MCAP schema: the
//! message's own fields, then each type it uses after a line of `=` and a `MSG: <type>`
//! line. Parsed once per schema into the field lists the CDR decoder walks.
//!
//! Constants (`byte OK=0`) describe values and take no bytes; default values (`float64 w
//! 1`) and comments are ignored. Bounded strings and sequences (`string<=10`, `int32[<=5]`)
//! are stored as their unbounded forms are.

use std::collections::HashMap;

/// Most elements a fixed-size array may declare: a larger one is refused rather than
/// decoded (no real message type comes near it).
const MAX_FIXED: usize = 1 << 20;

/// A primitive ROS 2 type and its CDR size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// `bool`: one byte, 0 or 1.
    Bool,
    /// `byte` (octet) and `uint8` and `char`: one unsigned byte.
    U8,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `uint16`.
    U16,
    /// `int32`.
    I32,
    /// `uint32`.
    U32,
    /// `int64`.
    I64,
    /// `uint64`.
    U64,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

impl Prim {
    /// Bytes the type takes, and its alignment.
    pub fn size(self) -> usize {
        match self {
            Prim::Bool | Prim::U8 | Prim::I8 => 1,
            Prim::I16 | Prim::U16 => 2,
            Prim::I32 | Prim::U32 | Prim::F32 => 4,
            Prim::I64 | Prim::U64 | Prim::F64 => 8,
        }
    }

    fn named(name: &str) -> Option<Prim> {
        Some(match name {
            "bool" => Prim::Bool,
            "byte" | "octet" | "uint8" | "char" => Prim::U8,
            "int8" => Prim::I8,
            "int16" => Prim::I16,
            "uint16" => Prim::U16,
            "int32" => Prim::I32,
            "uint32" => Prim::U32,
            "int64" => Prim::I64,
            "uint64" => Prim::U64,
            "float32" => Prim::F32,
            "float64" => Prim::F64,
            _ => return None,
        })
    }
}

/// What one element of a field is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Element {
    /// A primitive.
    Prim(Prim),
    /// A UTF-8 string.
    String,
    /// A wide string (UTF-16 code units in CDR).
    WString,
    /// A message: an index into [`MsgDefs::types`].
    Msg(usize),
}

/// How many elements a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// One.
    One,
    /// A fixed-size array: no count on the wire.
    Fixed(usize),
    /// A sequence (bounded or not): a `uint32` count, then the elements.
    Sequence,
}

/// One field of a message type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name, as the JSON key.
    pub name: String,
    /// Its element type.
    pub element: Element,
    /// How many elements.
    pub arity: Arity,
}

/// One message type: its name (`pkg/Name`) and fields in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgType {
    /// The type's name, package first, without `/msg/`.
    pub name: String,
    /// Its fields, in the order they are serialized.
    pub fields: Vec<Field>,
}

/// A parsed schema: every type it defines, the first being the message's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgDefs {
    /// The types; index 0 is the schema's message type.
    pub types: Vec<MsgType>,
}

/// A type name as this module keys it: `pkg/msg/Name` and `pkg/Name` are one type.
fn normalized(name: &str) -> String {
    match name.split('/').collect::<Vec<_>>().as_slice() {
        [pkg, "msg", ty] => format!("{pkg}/{ty}"),
        _ => name.to_string(),
    }
}

/// A field's type before message names are resolved.
struct RawField {
    name: String,
    base: String,
    arity: Arity,
}

impl MsgDefs {
    /// Parses the definition `text` of the schema named `schema_name`; the error says what
    /// in the text could not be read.
    pub fn parse(schema_name: &str, text: &str) -> Result<MsgDefs, String> {
        let mut sections: Vec<(String, Vec<RawField>)> =
            vec![(normalized(schema_name), Vec::new())];
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.len() >= 3 && line.bytes().all(|b| b == b'=') {
                sections.push((String::new(), Vec::new()));
                continue;
            }
            let Some(section) = sections.last_mut() else {
                continue;
            };
            if let Some(name) = line.strip_prefix("MSG:") {
                section.0 = normalized(name.trim());
                continue;
            }
            if let Some(field) =
                parse_line(line).map_err(|e| format!("line {}: {e}", number + 1))?
            {
                section.1.push(field);
            }
        }
        let index: HashMap<String, usize> = sections
            .iter()
            .enumerate()
            .rev()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        let mut types = Vec::with_capacity(sections.len());
        for (name, raw) in &sections {
            if name.is_empty() {
                return Err("a definition after a separator has no 'MSG:' line".into());
            }
            let package = name.split('/').next().unwrap_or_default();
            let mut fields = Vec::with_capacity(raw.len());
            for f in raw {
                let element = resolve(&f.base, package, &index).ok_or_else(|| {
                    format!(
                        "type '{}' of field '{}' in {name} is not defined",
                        f.base, f.name
                    )
                })?;
                fields.push(Field {
                    name: f.name.clone(),
                    element,
                    arity: f.arity,
                });
            }
            types.push(MsgType {
                name: name.clone(),
                fields,
            });
        }
        Ok(MsgDefs { types })
    }

    /// The schema's own message type.
    pub fn root(&self) -> &MsgType {
        &self.types[0]
    }
}

/// The element a field's base type names, looked up among the schema's types (a name
/// without a package is of the field's own package; `Header` is `std_msgs/Header`).
fn resolve(base: &str, package: &str, index: &HashMap<String, usize>) -> Option<Element> {
    let base = base.split("<=").next().unwrap_or(base);
    if let Some(prim) = Prim::named(base) {
        return Some(Element::Prim(prim));
    }
    match base {
        "string" => return Some(Element::String),
        "wstring" => return Some(Element::WString),
        _ => {}
    }
    let full = match (base.contains('/'), base) {
        (true, _) => normalized(base),
        (false, "Header") => "std_msgs/Header".to_string(),
        (false, _) => format!("{package}/{base}"),
    };
    index.get(&full).map(|&i| Element::Msg(i))
}

/// One line of a definition: a field, or `None` for a blank line, a comment or a constant.
fn parse_line(line: &str) -> Result<Option<RawField>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (ty, rest) = line
        .split_once(char::is_whitespace)
        .ok_or_else(|| format!("'{line}' has a type but no field name"))?;
    let rest = rest.trim_start();
    let name_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..name_len];
    if name.is_empty() {
        return Err(format!("'{line}' has no field name"));
    }
    if rest[name_len..].trim_start().starts_with('=') {
        return Ok(None);
    }
    let (base, arity) = match ty.split_once('[') {
        None => (ty, Arity::One),
        Some((base, bound)) => {
            let bound = bound
                .strip_suffix(']')
                .ok_or_else(|| format!("'{ty}' has an unclosed array bound"))?;
            let arity = if bound.is_empty() || bound.starts_with("<=") {
                Arity::Sequence
            } else {
                let n: usize = bound
                    .parse()
                    .map_err(|_| format!("'{ty}' has an array bound that is not a number"))?;
                if n > MAX_FIXED {
                    return Err(format!("'{ty}' declares more than {MAX_FIXED} elements"));
                }
                Arity::Fixed(n)
            };
            (base, arity)
        }
    };
    Ok(Some(RawField {
        name: name.to_string(),
        base: base.to_string(),
        arity,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ODOMETRY: &str = "std_msgs/Header header\nstring child_frame_id\n\
        geometry_msgs/PoseWithCovariance pose\n\
        ================================================================================\n\
        MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n\
        ================================================================================\n\
        MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n\
        ================================================================================\n\
        MSG: geometry_msgs/PoseWithCovariance\nPose pose\nfloat64[36] covariance\n\
        ================================================================================\n\
        MSG: geometry_msgs/Pose\nPoint position\n\
        ================================================================================\n\
        MSG: geometry_msgs/Point\nfloat64 x\nfloat64 y\nfloat64 z 0 # default and comment\n";

    #[test]
    fn nested_types_resolve_by_package() {
        let defs = MsgDefs::parse("nav_msgs/msg/Odometry", ODOMETRY).unwrap();
        assert_eq!(defs.root().name, "nav_msgs/Odometry");
        let names: Vec<&str> = defs.types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "nav_msgs/Odometry",
                "std_msgs/Header",
                "builtin_interfaces/Time",
                "geometry_msgs/PoseWithCovariance",
                "geometry_msgs/Pose",
                "geometry_msgs/Point"
            ]
        );
        let cov = &defs.types[3].fields[1];
        assert_eq!(
            (cov.element.clone(), cov.arity),
            (Element::Prim(Prim::F64), Arity::Fixed(36))
        );
        assert_eq!(defs.types[3].fields[0].element, Element::Msg(4));
        assert_eq!(defs.types[5].fields.len(), 3);
    }

    #[test]
    fn constants_bounds_and_comments() {
        let text = "byte OK=0\nint32 MAX = 5 # a limit\nstring<=8 name\nint32[<=4] ids\n\
                    # a comment\n\nuint8[] data\nstring S=\"a#b\"\nbool flag true\n";
        let defs = MsgDefs::parse("p/msg/T", text).unwrap();
        let fields: Vec<(&str, Arity)> = defs
            .root()
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.arity))
            .collect();
        assert_eq!(
            fields,
            [
                ("name", Arity::One),
                ("ids", Arity::Sequence),
                ("data", Arity::Sequence),
                ("flag", Arity::One)
            ]
        );
        assert_eq!(defs.root().fields[0].element, Element::String);
    }

    #[test]
    fn bad_definitions_say_what_is_wrong() {
        for (text, says) in [
            ("Missing thing", "type 'Missing' of field 'thing'"),
            ("int32[abc] x", "not a number"),
            ("int32[4 x", "unclosed"),
            ("int32[99999999] x", "more than"),
            ("int32", "no field name"),
            ("int32 x\n===\nint32 y", "no 'MSG:' line"),
        ] {
            let err = MsgDefs::parse("p/T", text).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }
}
