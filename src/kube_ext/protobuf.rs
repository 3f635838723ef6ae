//! Just enough of Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`) to read
//! and edit the `metadata` of an encoded object, without knowing its type.
//!
//! kubectl sends built-in kinds to the shadow API as protobuf (`kubectl create configmap`, ...).
//! The hub never decodes those objects itself: the parent's API server does, in a dry run (see
//! `hub::shadow::rest`). For that dry run the body must point at another namespace, drop its
//! resource version and, on a name clash, use `generateName`; this module makes those edits and
//! copies every other byte unchanged.
//!
//! Layout: the magic `k8s\0`, then a `runtime.Unknown` message (1: typeMeta, 2: raw, 3:
//! contentEncoding, 4: contentType). `raw` is the object's own message, whose field 1 is the
//! `ObjectMeta` for every top-level Kubernetes kind (1: name, 2: generateName, 3: namespace,
//! 6: resourceVersion, ...).

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8] = b"k8s\0";

const UNKNOWN_RAW: u64 = 2;
const UNKNOWN_CONTENT_ENCODING: u64 = 3;
const OBJECT_METADATA: u64 = 1;
const META_NAME: u64 = 1;
const META_GENERATE_NAME: u64 = 2;
const META_NAMESPACE: u64 = 3;
const META_RESOURCE_VERSION: u64 = 6;

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf magic number")]
    NoMagic,
    #[error("the protobuf message is truncated")]
    Truncated,
    #[error("unsupported protobuf wire type {0}")]
    WireType(u8),
    #[error("the protobuf body carries no object")]
    NoObject,
    #[error("encoded protobuf objects (contentEncoding {0:?}) are not supported")]
    ContentEncoding(String),
}

/// The identifying metadata of an encoded object (empty strings for unset fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub name: String,
    pub generate_name: String,
    pub namespace: String,
    pub resource_version: String,
}

/// Edits to an object's metadata; everything not named here is copied unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaEdit {
    pub clear_namespace: bool,
    pub clear_resource_version: bool,
    /// Replace the name with `generateName: <this>` (the API server then picks a free name).
    pub generate_name: Option<String>,
}

/// Whether `body` looks like a Kubernetes protobuf body.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// Reads name, generateName, namespace and resourceVersion.
pub fn read_meta(body: &[u8]) -> Result<Meta, ProtobufError> {
    let raw = object_bytes(body)?;
    let mut meta = Meta::default();
    let Some(metadata) = fields(raw)?
        .into_iter()
        .find(|f| f.number == OBJECT_METADATA && f.wire == WIRE_LEN)
    else {
        return Ok(meta);
    };
    for f in fields(metadata.payload)? {
        if f.wire != WIRE_LEN {
            continue;
        }
        let text = || String::from_utf8_lossy(f.payload).into_owned();
        match f.number {
            META_NAME => meta.name = text(),
            META_GENERATE_NAME => meta.generate_name = text(),
            META_NAMESPACE => meta.namespace = text(),
            META_RESOURCE_VERSION => meta.resource_version = text(),
            _ => {}
        }
    }
    Ok(meta)
}

/// Returns `body` with `edit` applied to the object's metadata.
pub fn edit_meta(body: &[u8], edit: &MetaEdit) -> Result<Vec<u8>, ProtobufError> {
    // validates magic, framing and content encoding
    object_bytes(body)?;
    let envelope = body.get(MAGIC.len()..).ok_or(ProtobufError::NoMagic)?;
    let mut out = MAGIC.to_vec();
    for f in fields(envelope)? {
        if f.number == UNKNOWN_RAW && f.wire == WIRE_LEN {
            put_len_field(&mut out, UNKNOWN_RAW, &edit_object(f.payload, edit)?);
        } else {
            out.extend_from_slice(f.whole);
        }
    }
    Ok(out)
}

fn edit_object(raw: &[u8], edit: &MetaEdit) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut seen_metadata = false;
    for f in fields(raw)? {
        if f.number == OBJECT_METADATA && f.wire == WIRE_LEN && !seen_metadata {
            seen_metadata = true;
            put_len_field(&mut out, OBJECT_METADATA, &edit_metadata(f.payload, edit)?);
        } else {
            out.extend_from_slice(f.whole);
        }
    }
    if !seen_metadata && let Some(g) = &edit.generate_name {
        let mut meta = Vec::new();
        put_len_field(&mut meta, META_GENERATE_NAME, g.as_bytes());
        let mut with_meta = Vec::with_capacity(out.len() + meta.len() + 4);
        put_len_field(&mut with_meta, OBJECT_METADATA, &meta);
        with_meta.extend_from_slice(&out);
        out = with_meta;
    }
    Ok(out)
}

fn edit_metadata(meta: &[u8], edit: &MetaEdit) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::with_capacity(meta.len());
    for f in fields(meta)? {
        let drop = match f.number {
            META_NAME | META_GENERATE_NAME => edit.generate_name.is_some(),
            META_NAMESPACE => edit.clear_namespace,
            META_RESOURCE_VERSION => edit.clear_resource_version,
            _ => false,
        };
        if !drop {
            out.extend_from_slice(f.whole);
        }
    }
    if let Some(g) = &edit.generate_name {
        put_len_field(&mut out, META_GENERATE_NAME, g.as_bytes());
    }
    Ok(out)
}

/// The object message inside the envelope.
fn object_bytes(body: &[u8]) -> Result<&[u8], ProtobufError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let mut raw = None;
    for f in fields(envelope)? {
        match (f.number, f.wire) {
            (UNKNOWN_RAW, WIRE_LEN) => raw = Some(f.payload),
            (UNKNOWN_CONTENT_ENCODING, WIRE_LEN) if !f.payload.is_empty() => {
                return Err(ProtobufError::ContentEncoding(
                    String::from_utf8_lossy(f.payload).into_owned(),
                ));
            }
            _ => {}
        }
    }
    raw.ok_or(ProtobufError::NoObject)
}

/// One field of a message: its number, wire type, the bytes of the whole field (key included)
/// and, for length-delimited fields, the payload.
struct Field<'a> {
    number: u64,
    wire: u8,
    whole: &'a [u8],
    payload: &'a [u8],
}

fn fields(mut buf: &[u8]) -> Result<Vec<Field<'_>>, ProtobufError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let start = buf;
        let key = read_varint(&mut buf)?;
        let wire = (key & 7) as u8;
        let number = key >> 3;
        let payload = match wire {
            WIRE_VARINT => {
                read_varint(&mut buf)?;
                &[][..]
            }
            WIRE_FIXED64 => take(&mut buf, 8)?,
            WIRE_FIXED32 => take(&mut buf, 4)?,
            WIRE_LEN => {
                let len = usize::try_from(read_varint(&mut buf)?)
                    .map_err(|_| ProtobufError::Truncated)?;
                take(&mut buf, len)?
            }
            other => return Err(ProtobufError::WireType(other)),
        };
        let used = start.len() - buf.len();
        out.push(Field {
            number,
            wire,
            whole: &start[..used],
            payload,
        });
    }
    Ok(out)
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], ProtobufError> {
    if buf.len() < n {
        return Err(ProtobufError::Truncated);
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Ok(head)
}

fn read_varint(buf: &mut &[u8]) -> Result<u64, ProtobufError> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(ProtobufError::Truncated)?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ProtobufError::Truncated)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_len_field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    put_varint(out, (number << 3) | u64::from(WIRE_LEN));
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_len_field(&mut out, number, payload);
        out
    }

    /// A ConfigMap `demo/cfg` (resourceVersion 7, a label, data a=b) as the API server encodes it.
    fn config_map() -> Vec<u8> {
        let mut meta = Vec::new();
        meta.extend(len_field(1, b"cfg"));
        meta.extend(len_field(3, b"demo"));
        meta.extend(len_field(6, b"7"));
        // generation: a varint field the edit must copy as it is
        put_varint(&mut meta, 7 << 3);
        put_varint(&mut meta, 300);
        let mut label = len_field(1, b"app");
        label.extend(len_field(2, b"web"));
        meta.extend(len_field(11, &label));
        let mut data = len_field(1, b"a");
        data.extend(len_field(2, b"b"));
        let mut object = len_field(1, &meta);
        object.extend(len_field(2, &data));
        let mut type_meta = len_field(1, b"v1");
        type_meta.extend(len_field(2, b"ConfigMap"));
        let mut body = MAGIC.to_vec();
        body.extend(len_field(1, &type_meta));
        body.extend(len_field(2, &object));
        body.extend(len_field(3, b""));
        body.extend(len_field(4, b""));
        body
    }

    #[test]
    fn reads_the_identifying_metadata() {
        let meta = read_meta(&config_map()).unwrap();
        assert_eq!(
            meta,
            Meta {
                name: "cfg".into(),
                generate_name: String::new(),
                namespace: "demo".into(),
                resource_version: "7".into(),
            }
        );
        assert!(is_protobuf(&config_map()));
        assert!(!is_protobuf(b"{}"));
    }

    #[test]
    fn edits_touch_only_what_they_name() {
        let body = config_map();
        assert_eq!(edit_meta(&body, &MetaEdit::default()).unwrap(), body);
        let edited = edit_meta(
            &body,
            &MetaEdit {
                clear_namespace: true,
                clear_resource_version: true,
                generate_name: None,
            },
        )
        .unwrap();
        let meta = read_meta(&edited).unwrap();
        assert_eq!((meta.name.as_str(), meta.namespace.as_str()), ("cfg", ""));
        assert_eq!(meta.resource_version, "");
        // the label, the generation and the data survive byte for byte
        let raw = object_bytes(&edited).unwrap();
        let f = fields(raw).unwrap();
        let md = fields(f[0].payload).unwrap();
        assert_eq!(md.len(), 3, "name, generation, labels");
        assert_eq!(md[1].whole, [7 << 3, 0xac, 0x02]);
        assert_eq!(
            f[1].whole,
            len_field(2, &[len_field(1, b"a"), len_field(2, b"b")].concat())
        );

        let renamed = edit_meta(
            &body,
            &MetaEdit {
                generate_name: Some("cfg".into()),
                ..MetaEdit::default()
            },
        )
        .unwrap();
        let meta = read_meta(&renamed).unwrap();
        assert_eq!(
            (meta.name.as_str(), meta.generate_name.as_str()),
            ("", "cfg")
        );
        assert_eq!(meta.namespace, "demo");
    }

    #[test]
    fn broken_bodies_are_errors_not_panics() {
        let body = config_map();
        assert_eq!(read_meta(b"{\"a\":1}"), Err(ProtobufError::NoMagic));
        for cut in MAGIC.len() + 1..body.len() - 4 {
            let _ = read_meta(&body[..cut]);
            let _ = edit_meta(&body[..cut], &MetaEdit::default());
        }
        assert_eq!(
            read_meta(&body[..body.len() - 8]),
            Err(ProtobufError::Truncated)
        );
        assert_eq!(read_meta(MAGIC), Err(ProtobufError::NoObject));
        let mut gzip = MAGIC.to_vec();
        gzip.extend(len_field(2, b""));
        gzip.extend(len_field(3, b"gzip"));
        assert!(matches!(
            read_meta(&gzip),
            Err(ProtobufError::ContentEncoding(_))
        ));
        let mut group = MAGIC.to_vec();
        group.push((2 << 3) | 3);
        assert_eq!(read_meta(&group), Err(ProtobufError::WireType(3)));
    }
}
