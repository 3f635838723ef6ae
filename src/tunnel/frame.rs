//! Tunnel message framing, byte-compatible with rancher/remotedialer v0.3.0 (hub.md §2.5).
//!
//! Every WebSocket binary message carries exactly one tunnel message:
//!
//! ```text
//! varint id | varint connID | varint type | [varint deadline] | payload
//! ```
//!
//! The varints are Go's *signed* varints (`binary.PutVarint` / `binary.ReadVarint`: zig-zag, then
//! LEB128). The deadline is only present for `Data` and `Connect`; Go peers ignore it on read, so
//! we always write the legacy 15000 (ms) and skip it on read. This module is pure: no I/O, no
//! clocks, and decoding never panics on hostile input.

use bytes::{BufMut, Bytes, BytesMut};

/// The deadline value remotedialer writers put in `Data`/`Connect` headers (15 s in ms).
pub const LEGACY_DEADLINE_MS: i64 = 15_000;

/// remotedialer reads at most this many bytes of an `Error` or `Connect` payload.
pub const MAX_TEXT_PAYLOAD: usize = 100;

/// Longest Go varint for a 64-bit value.
const MAX_VARINT_LEN: usize = 10;

/// Message types of the remotedialer protocol (`messageType` in message.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i64)]
pub enum MessageType {
    /// Stream bytes for `conn_id`.
    Data = 1,
    /// Open `conn_id` to the `<proto>/<address>` in the payload.
    Connect = 2,
    /// Close `conn_id`; the payload is the error text, `EOF` for a normal close.
    Error = 3,
    /// Peer gossip (peer hubs only): the sender has a session for a client key.
    AddClient = 4,
    /// Peer gossip (peer hubs only): that session is gone.
    RemoveClient = 5,
    /// Stop sending `Data` on `conn_id`.
    Pause = 6,
    /// Resume sending `Data` on `conn_id`.
    Resume = 7,
}

impl MessageType {
    /// Maps a wire value to a type; `None` for values this protocol version does not define.
    pub fn from_i64(value: i64) -> Option<Self> {
        Some(match value {
            1 => Self::Data,
            2 => Self::Connect,
            3 => Self::Error,
            4 => Self::AddClient,
            5 => Self::RemoveClient,
            6 => Self::Pause,
            7 => Self::Resume,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn as_i64(self) -> i64 {
        self as i64
    }

    /// Whether the (legacy) deadline varint follows the type on the wire.
    pub fn has_deadline(self) -> bool {
        matches!(self, Self::Data | Self::Connect)
    }
}

/// Why a tunnel message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The message ended inside the header.
    #[error("truncated tunnel message header")]
    Truncated,
    /// A varint did not fit in 64 bits (Go: "binary: varint overflows a 64-bit integer").
    #[error("varint overflows a 64-bit integer")]
    Overflow,
    /// A type value this protocol version does not define (e.g. a newer peer's extension).
    #[error("unknown tunnel message type {0}")]
    UnknownType(i64),
    /// A `Connect` payload that is not `<proto>/<address>`.
    #[error("failed to parse connect address")]
    BadConnectTarget,
    /// An `AddClient`/`RemoveClient` payload that is not `<clientKey>/<sessionKey>`.
    #[error("failed to parse client key")]
    BadClientKey,
}

/// One tunnel message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Per-process message counter; informational only.
    pub id: i64,
    /// Logical connection this message belongs to.
    pub conn_id: i64,
    /// What the message means.
    pub kind: MessageType,
    /// Everything after the header.
    pub payload: Bytes,
}

impl Message {
    /// A message with an arbitrary payload.
    pub fn new(id: i64, conn_id: i64, kind: MessageType, payload: Bytes) -> Self {
        Self {
            id,
            conn_id,
            kind,
            payload,
        }
    }

    /// Stream bytes for `conn_id`.
    pub fn data(id: i64, conn_id: i64, payload: Bytes) -> Self {
        Self::new(id, conn_id, MessageType::Data, payload)
    }

    /// Asks the peer to open `proto/address` as `conn_id`.
    pub fn connect(id: i64, conn_id: i64, proto: &str, address: &str) -> Self {
        let payload = Bytes::from(format!("{proto}/{address}"));
        Self::new(id, conn_id, MessageType::Connect, payload)
    }

    /// Closes `conn_id`; `text` is `EOF` for a normal close.
    pub fn error(id: i64, conn_id: i64, text: &str) -> Self {
        Self::new(
            id,
            conn_id,
            MessageType::Error,
            Bytes::copy_from_slice(text.as_bytes()),
        )
    }

    /// Flow control: stop sending on `conn_id`.
    pub fn pause(id: i64, conn_id: i64) -> Self {
        Self::new(id, conn_id, MessageType::Pause, Bytes::new())
    }

    /// Flow control: resume sending on `conn_id`.
    pub fn resume(id: i64, conn_id: i64) -> Self {
        Self::new(id, conn_id, MessageType::Resume, Bytes::new())
    }

    /// Peer gossip: the sender now has session `session_key` for `client_key`.
    pub fn add_client(id: i64, client_key: &str, session_key: &str) -> Self {
        let payload = Bytes::from(format!("{client_key}/{session_key}"));
        Self::new(id, 0, MessageType::AddClient, payload)
    }

    /// Peer gossip: the sender's session `session_key` for `client_key` is gone.
    pub fn remove_client(id: i64, client_key: &str, session_key: &str) -> Self {
        let payload = Bytes::from(format!("{client_key}/{session_key}"));
        Self::new(id, 0, MessageType::RemoveClient, payload)
    }

    /// `(clientKey, sessionKey)` of an `AddClient`/`RemoveClient` message.
    pub fn client_target(&self) -> Result<(String, String), FrameError> {
        let text = String::from_utf8_lossy(&self.payload);
        let (client, session) = text.split_once('/').ok_or(FrameError::BadClientKey)?;
        if client.is_empty() {
            return Err(FrameError::BadClientKey);
        }
        Ok((client.to_owned(), session.to_owned()))
    }

    /// Serializes the message exactly as remotedialer's `message.Bytes()` does.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(4 * MAX_VARINT_LEN + self.payload.len());
        put_varint(&mut out, self.id);
        put_varint(&mut out, self.conn_id);
        put_varint(&mut out, self.kind.as_i64());
        if self.kind.has_deadline() {
            put_varint(&mut out, LEGACY_DEADLINE_MS);
        }
        out.put_slice(&self.payload);
        out.freeze()
    }

    /// Parses one WebSocket binary message. The payload shares `buf`'s storage.
    pub fn decode(buf: Bytes) -> Result<Self, FrameError> {
        let mut offset = 0;
        let mut next = |buf: &Bytes| -> Result<i64, FrameError> {
            let rest = buf.get(offset..).ok_or(FrameError::Truncated)?;
            let (value, used) = read_varint(rest)?;
            offset += used;
            Ok(value)
        };
        let id = next(&buf)?;
        let conn_id = next(&buf)?;
        let raw_kind = next(&buf)?;
        let kind = MessageType::from_i64(raw_kind).ok_or(FrameError::UnknownType(raw_kind))?;
        if kind.has_deadline() {
            next(&buf)?;
        }
        if offset > buf.len() {
            return Err(FrameError::Truncated);
        }
        let payload = buf.slice(offset..);
        Ok(Self {
            id,
            conn_id,
            kind,
            payload,
        })
    }

    /// The text of an `Error` message as remotedialer reads it: at most 100 bytes.
    pub fn error_text(&self) -> String {
        text_prefix(&self.payload)
    }

    /// `(proto, address)` of a `Connect` message, reading at most 100 bytes like remotedialer.
    pub fn connect_target(&self) -> Result<(String, String), FrameError> {
        let text = text_prefix(&self.payload);
        let (proto, address) = text.split_once('/').ok_or(FrameError::BadConnectTarget)?;
        Ok((proto.to_owned(), address.to_owned()))
    }
}

fn text_prefix(payload: &[u8]) -> String {
    let end = payload.len().min(MAX_TEXT_PAYLOAD);
    String::from_utf8_lossy(&payload[..end]).into_owned()
}

/// Appends `value` as a Go signed varint (`binary.PutVarint`).
pub fn put_varint(out: &mut BytesMut, value: i64) {
    // Zig-zag: small magnitudes of either sign get short encodings.
    let mut ux = (value as u64) << 1;
    if value < 0 {
        ux = !ux;
    }
    while ux >= 0x80 {
        out.put_u8((ux as u8) | 0x80);
        ux >>= 7;
    }
    out.put_u8(ux as u8);
}

/// Reads a Go signed varint (`binary.ReadVarint`) from the front of `buf`.
///
/// Returns the value and the number of bytes consumed. Overlong encodings are rejected exactly
/// where Go's `ReadUvarint` rejects them (more than 10 bytes, or a 10th byte above 1).
pub fn read_varint(buf: &[u8]) -> Result<(i64, usize), FrameError> {
    let mut ux: u64 = 0;
    let mut shift = 0u32;
    for (i, &byte) in buf.iter().enumerate().take(MAX_VARINT_LEN) {
        if byte < 0x80 {
            if i == MAX_VARINT_LEN - 1 && byte > 1 {
                return Err(FrameError::Overflow);
            }
            ux |= u64::from(byte) << shift;
            let mut value = (ux >> 1) as i64;
            if ux & 1 != 0 {
                value = !value;
            }
            return Ok((value, i + 1));
        }
        ux |= u64::from(byte & 0x7f) << shift;
        shift += 7;
    }
    if buf.len() >= MAX_VARINT_LEN {
        Err(FrameError::Overflow)
    } else {
        Err(FrameError::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn varint(value: i64) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_varint(&mut out, value);
        out.to_vec()
    }

    // Golden values computed by hand with Go's algorithm:
    //   ux = uint64(x) << 1; if x < 0 { ux = ^ux }   (zig-zag)
    //   then 7 bits at a time, low group first, high bit set on all but the last byte.
    #[test]
    fn varint_golden() {
        assert_eq!(varint(0), [0x00]);
        assert_eq!(varint(1), [0x02]); // 1 -> 2
        assert_eq!(varint(-1), [0x01]); // -1 -> ^(-2 as u64) = 1
        assert_eq!(varint(63), [0x7e]); // 126
        assert_eq!(varint(-64), [0x7f]); // ^(-128) = 127
        assert_eq!(varint(64), [0x80, 0x01]); // 128 = 0b1_0000000
        // 15000 -> 30000 = 0b1_1101010_0110000 -> 0x30|0x80, 0x6a|0x80, 0x01
        assert_eq!(varint(15_000), [0xb0, 0xea, 0x01]);
        // i64::MAX -> 0xffff_ffff_ffff_fffe: nine 7-bit groups of ones (first one 0x7e) then 1.
        assert_eq!(
            varint(i64::MAX),
            [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        // i64::MIN -> (0 << 1) inverted = u64::MAX.
        assert_eq!(
            varint(i64::MIN),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    #[test]
    fn message_golden() {
        // Data: id 1 -> 0x02, connID 2 -> 0x04, type 1 -> 0x02, deadline 15000 -> b0 ea 01, "hi".
        let data = Message::data(1, 2, Bytes::from_static(b"hi"));
        let golden = [0x02, 0x04, 0x02, 0xb0, 0xea, 0x01, b'h', b'i'];
        assert_eq!(data.encode().as_ref(), golden);
        assert_eq!(Message::decode(Bytes::copy_from_slice(&golden)), Ok(data));

        // Error: id -65 -> ^(-130) = 129 -> 81 01, connID 3 -> 06, type 3 -> 06, no deadline.
        let err = Message::error(-65, 3, "EOF");
        let golden = [0x81, 0x01, 0x06, 0x06, b'E', b'O', b'F'];
        assert_eq!(err.encode().as_ref(), golden);
        assert_eq!(Message::decode(Bytes::copy_from_slice(&golden)), Ok(err));

        // Pause: id 64 -> 128 -> 80 01, connID 300 -> 600 = 0b100_1011000 -> d8 04, type 6 -> 0c.
        let pause = Message::pause(64, 300);
        assert_eq!(pause.encode().as_ref(), [0x80, 0x01, 0xd8, 0x04, 0x0c]);

        // Connect: id 0, connID 2, type 2 -> 04, deadline, then "tcp/10.0.0.1:443".
        let connect = Message::connect(0, 2, "tcp", "10.0.0.1:443");
        let mut golden = vec![0x00, 0x04, 0x04, 0xb0, 0xea, 0x01];
        golden.extend_from_slice(b"tcp/10.0.0.1:443");
        assert_eq!(connect.encode().as_ref(), golden.as_slice());
        assert_eq!(
            connect.connect_target(),
            Ok(("tcp".to_owned(), "10.0.0.1:443".to_owned()))
        );
    }

    #[test]
    fn deadline_value_is_ignored_on_read() {
        // Deadline 0 instead of 15000 still decodes to the same message.
        let bytes = Bytes::from_static(&[0x02, 0x04, 0x02, 0x00, b'x']);
        let msg = Message::decode(bytes).expect("decodes");
        assert_eq!(msg.payload.as_ref(), b"x");
    }

    #[test]
    fn truncated_and_garbage_input() {
        assert_eq!(Message::decode(Bytes::new()), Err(FrameError::Truncated));
        assert_eq!(
            Message::decode(Bytes::from_static(&[0x02, 0x04])),
            Err(FrameError::Truncated)
        );
        // Data without its deadline.
        assert_eq!(
            Message::decode(Bytes::from_static(&[0x02, 0x04, 0x02])),
            Err(FrameError::Truncated)
        );
        // Continuation bit set on the last byte.
        assert_eq!(
            Message::decode(Bytes::from_static(&[0x02, 0x84])),
            Err(FrameError::Truncated)
        );
        assert_eq!(
            Message::decode(Bytes::from_static(&[0xff; 11])),
            Err(FrameError::Overflow)
        );
        // Tenth byte above 1 overflows 64 bits.
        let mut overlong = [0xff_u8; 10];
        overlong[9] = 0x02;
        assert_eq!(read_varint(&overlong), Err(FrameError::Overflow));
        assert_eq!(
            Message::decode(Bytes::from_static(&[0x02, 0x04, 0x10])),
            Err(FrameError::UnknownType(8))
        );
        let bad_connect = Message::new(1, 2, MessageType::Connect, Bytes::from_static(b"tcp"));
        assert_eq!(
            bad_connect.connect_target(),
            Err(FrameError::BadConnectTarget)
        );
    }

    #[test]
    fn text_payloads_are_capped_like_remotedialer() {
        let long = "x".repeat(300);
        let msg = Message::error(1, 2, &long);
        assert_eq!(msg.error_text().len(), MAX_TEXT_PAYLOAD);
    }

    fn kind_strategy() -> impl Strategy<Value = MessageType> {
        (1i64..=7).prop_map(|v| MessageType::from_i64(v).expect("1..=7 are defined"))
    }

    /// Raw bytes, or a valid header (any type value, deadline or not) followed by random bytes,
    /// so that decoding gets past the varints as often as it fails in them.
    fn random_frame() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            (
                any::<i64>(),
                any::<i64>(),
                -1_i64..10,
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..160),
            )
                .prop_map(|(id, conn, kind, deadline, tail)| {
                    let mut out = BytesMut::new();
                    put_varint(&mut out, id);
                    put_varint(&mut out, conn);
                    put_varint(&mut out, kind);
                    if deadline {
                        put_varint(&mut out, LEGACY_DEADLINE_MS);
                    }
                    out.extend_from_slice(&tail);
                    out.to_vec()
                }),
        ]
    }

    proptest! {
        #![proptest_config(crate::fuzz_support::config(crate::fuzz_support::DEFAULT_CASES))]

        #[test]
        fn round_trip(
            id in any::<i64>(),
            conn_id in any::<i64>(),
            kind in kind_strategy(),
            payload in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let msg = Message::new(id, conn_id, kind, Bytes::from(payload));
            prop_assert_eq!(Message::decode(msg.encode()), Ok(msg));
        }

        #[test]
        fn varint_round_trip(value in any::<i64>()) {
            let bytes = varint(value);
            prop_assert!(bytes.len() <= MAX_VARINT_LEN);
            prop_assert_eq!(read_varint(&bytes), Ok((value, bytes.len())));
        }

        /// Whatever the peer sends, decoding returns: a message that survives re-encoding (the
        /// deadline and overlong varints are not kept, the meaning is), or an error with a
        /// message; the payload accessors never panic either.
        #[test]
        fn random_frames_never_panic_the_decoder(bytes in random_frame()) {
            match Message::decode(Bytes::from(bytes)) {
                Ok(msg) => {
                    prop_assert_eq!(Message::decode(msg.encode()), Ok(msg.clone()));
                    prop_assert!(msg.error_text().len() <= MAX_TEXT_PAYLOAD * 3);
                    if let Err(e) = msg.connect_target() {
                        crate::fuzz_support::assert_readable(&e.to_string(), "a Connect payload")?;
                    }
                    if let Err(e) = msg.client_target() {
                        crate::fuzz_support::assert_readable(&e.to_string(), "a gossip payload")?;
                    }
                }
                Err(e) => crate::fuzz_support::assert_readable(&e.to_string(), "a frame")?,
            }
        }

        #[test]
        fn every_truncation_of_a_header_errors(
            id in any::<i64>(),
            conn_id in any::<i64>(),
            kind in kind_strategy(),
        ) {
            let full = Message::new(id, conn_id, kind, Bytes::new()).encode();
            for cut in 0..full.len() {
                prop_assert!(Message::decode(full.slice(..cut)).is_err());
            }
        }
    }
}
