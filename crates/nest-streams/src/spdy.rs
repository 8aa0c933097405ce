//! SPDY/3.1 framing (draft-mbelshe-httpbis-spdy-00 and the 3.1 revision), as much of it as Kubernetes' streams use
//! (`moby/spdystream` over `golang.org/x/net/spdy` is the peer every client links): the frames, and the header
//! blocks every SYN_STREAM, SYN_REPLY and HEADERS frame carries, compressed with zlib and SPDY/3's preset
//! dictionary in one zlib stream per direction for the connection's life. [`session`] runs a connection's streams
//! over it.
//!
//! Everything a peer sends is bounded where it is read: a frame's length ([`MAX_FRAME`]) before its payload is
//! buffered, a header block's size once inflated ([`MAX_HEADER_BLOCK`]) and its number of pairs ([`MAX_HEADERS`]).
//! What breaks a bound or the protocol is an [`Error`], which ends the connection that sent it.

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

pub mod remotecommand;
pub mod session;

/// The largest frame payload read from a peer. Go's clients send data in `io.Copy`'s 32 KiB chunks; a header block
/// is a few hundred bytes.
pub const MAX_FRAME: usize = 1 << 20;
/// The largest header block, once inflated.
pub const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The most name/value pairs in one header block.
pub const MAX_HEADERS: usize = 64;
/// The SPDY version spoken.
const VERSION: u16 = 3;

/// A control frame's flag: the sender will send no more on the stream.
const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM's flag: the stream is the sender's alone to write (the receiver is half-closed from the start).
const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM's status codes used here.
pub mod status {
    /// A frame the protocol does not allow.
    pub const PROTOCOL_ERROR: u32 = 1;
    /// A frame for a stream that is not open.
    pub const INVALID_STREAM: u32 = 2;
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: u32 = 3;
    /// The stream is no longer needed.
    pub const CANCEL: u32 = 5;
}

/// A header block's name/value pairs, names in lowercase as SPDY/3 carries them. A value with several parts keeps
/// them separated by NUL, as on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The first value of `name` (compared without case), its first part.
    pub fn get(&self, name: &str) -> Option<&str> {
        let (_, value) = self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        value.split('\0').next()
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A peer opens a stream.
    SynStream {
        /// Its identifier: odd from a client, even from a server.
        stream: u32,
        /// The stream it belongs to (0 for none).
        associated: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// The opener sends no data after this frame.
        fin: bool,
        /// The receiver sends nothing on it.
        unidirectional: bool,
        /// Its headers.
        headers: Headers,
    },
    /// The receiver of a SYN_STREAM accepts it.
    SynReply {
        /// The stream.
        stream: u32,
        /// The replier sends nothing more on it.
        fin: bool,
        /// Its headers.
        headers: Headers,
    },
    /// A stream ends abnormally.
    RstStream {
        /// The stream.
        stream: u32,
        /// Why ([`status`]).
        status: u32,
    },
    /// Connection settings (read and ignored: Kubernetes' peers send none that matter).
    Settings {
        /// How many entries it had.
        entries: u32,
    },
    /// A liveness check, echoed by the receiver when the other side sent it.
    Ping {
        /// Its identifier: odd from a client.
        id: u32,
    },
    /// The sender will open no more streams.
    GoAway {
        /// The last stream the sender processed.
        last_good: u32,
        /// Why (0: a normal end).
        status: u32,
    },
    /// More headers for a stream.
    Headers {
        /// The stream.
        stream: u32,
        /// The sender sends nothing more on it.
        fin: bool,
        /// The headers.
        headers: Headers,
    },
    /// Flow control (read and ignored: `spdystream` implements none, so neither side may rely on it).
    WindowUpdate {
        /// The stream.
        stream: u32,
        /// The window's growth.
        delta: u32,
    },
    /// A control frame of a type this end does not know, skipped as the protocol asks.
    Unknown {
        /// Its type.
        kind: u16,
    },
    /// A stream's bytes.
    Data {
        /// The stream.
        stream: u32,
        /// The sender sends nothing more on it.
        fin: bool,
        /// The bytes (possibly none).
        data: Bytes,
    },
}

/// What breaks the protocol or a bound.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A frame longer than [`MAX_FRAME`].
    #[error("a frame of {0} bytes, more than the {max} allowed", max = MAX_FRAME)]
    TooLarge(usize),
    /// A control frame of another SPDY version.
    #[error("a frame of SPDY version {0}, where 3 is spoken")]
    Version(u16),
    /// A frame too short for its type, or with a field out of range.
    #[error("a malformed {0} frame")]
    Malformed(&'static str),
    /// A header block that does not inflate, or inflates to more than [`MAX_HEADER_BLOCK`].
    #[error("a header block that does not inflate: {0}")]
    Compression(String),
    /// A header block with more than [`MAX_HEADERS`] pairs, or whose lengths overrun it.
    #[error("a header block that breaks its bounds: {0}")]
    HeaderBlock(&'static str),
}

// === impl the header dictionary ===

/// SPDY/3's zlib dictionary (draft 3, §2.6.10.1): these words, each after its length as four big-endian bytes, then
/// the tail as it stands.
const DICTIONARY_WORDS: &[&str] = &[
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505203 Non-Au",
    "thoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidd",
    "en404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr Ma",
    "y Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,imag",
    "e/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicpri",
    "vatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The dictionary's bytes.
fn dictionary() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1424);
    for word in DICTIONARY_WORDS {
        bytes.put_u32(word.len() as u32);
        bytes.extend_from_slice(word.as_bytes());
    }
    bytes.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    bytes
}

// === impl Decoder ===

/// Reads frames from a peer, inflating their header blocks with the connection's one zlib stream.
pub struct Decoder {
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder { inflate: Decompress::new(true) }
    }
}

impl Decoder {
    /// The first frame of `buffer`, taken from it, once all of it is there (`None` until then). A frame's length is
    /// checked before its payload is waited for.
    pub fn decode(&mut self, buffer: &mut BytesMut) -> Result<Option<Frame>, Error> {
        let Some(head) = buffer.get(..8) else { return Ok(None) };
        let length = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
        if length > MAX_FRAME {
            return Err(Error::TooLarge(length));
        }
        if buffer.len() < 8 + length {
            buffer.reserve(8 + length - buffer.len());
            return Ok(None);
        }
        let mut head = buffer.split_to(8);
        let payload = buffer.split_to(length).freeze();
        let word = head.get_u32();
        let flags = head.get_u8();
        if word & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data { stream: word, fin: flags & FLAG_FIN != 0, data: payload }));
        }
        let version = (word >> 16) as u16 & 0x7fff;
        if version != VERSION {
            return Err(Error::Version(version));
        }
        self.control(word as u16, flags, payload).map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, mut payload: Bytes) -> Result<Frame, Error> {
        let fin = flags & FLAG_FIN != 0;
        let need = |payload: &Bytes, at_least: usize, name| {
            if payload.len() < at_least { Err(Error::Malformed(name)) } else { Ok(()) }
        };
        Ok(match kind {
            1 => {
                need(&payload, 10, "SYN_STREAM")?;
                let stream = payload.get_u32() & 0x7fff_ffff;
                let associated = payload.get_u32() & 0x7fff_ffff;
                let priority = payload.get_u8() >> 5;
                let _slot = payload.get_u8();
                let headers = self.headers(&payload)?;
                let unidirectional = flags & FLAG_UNIDIRECTIONAL != 0;
                Frame::SynStream { stream, associated, priority, fin, unidirectional, headers }
            }
            2 | 8 => {
                need(&payload, 4, "SYN_REPLY or HEADERS")?;
                let stream = payload.get_u32() & 0x7fff_ffff;
                let headers = self.headers(&payload)?;
                if kind == 2 {
                    Frame::SynReply { stream, fin, headers }
                } else {
                    Frame::Headers { stream, fin, headers }
                }
            }
            3 | 7 | 9 => {
                if payload.len() != 8 {
                    return Err(Error::Malformed("RST_STREAM, GOAWAY or WINDOW_UPDATE"));
                }
                let (first, second) = (payload.get_u32() & 0x7fff_ffff, payload.get_u32());
                match kind {
                    3 => Frame::RstStream { stream: first, status: second },
                    7 => Frame::GoAway { last_good: first, status: second },
                    _ => Frame::WindowUpdate { stream: first, delta: second & 0x7fff_ffff },
                }
            }
            4 => {
                need(&payload, 4, "SETTINGS")?;
                let entries = payload.get_u32();
                let expected = usize::try_from(entries).ok().and_then(|n| n.checked_mul(8));
                if expected != Some(payload.len()) {
                    return Err(Error::Malformed("SETTINGS"));
                }
                Frame::Settings { entries }
            }
            6 => {
                if payload.len() != 4 {
                    return Err(Error::Malformed("PING"));
                }
                Frame::Ping { id: payload.get_u32() }
            }
            kind => Frame::Unknown { kind },
        })
    }

    /// Inflates a header block (the next part of the connection's zlib stream) and reads its pairs.
    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, Error> {
        let block = self.inflate(compressed)?;
        parse_header_block(&block)
    }

    fn inflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        loop {
            out.reserve(4096);
            let (in_before, out_before) = (self.inflate.total_in(), self.inflate.total_out());
            let result = self.inflate.decompress_vec(input, &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.inflate.total_in() - in_before).unwrap_or(usize::MAX);
            let produced = self.inflate.total_out() - out_before;
            input = input.get(consumed..).unwrap_or_default();
            match result {
                Err(error) if error.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&dictionary()).map_err(|e| Error::Compression(e.to_string()))?;
                    continue;
                }
                Err(error) => return Err(Error::Compression(error.to_string())),
                Ok(Status::StreamEnd) => return Err(Error::Compression("the header stream ended".into())),
                Ok(Status::Ok | Status::BufError) => {}
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(Error::Compression(format!("more than {MAX_HEADER_BLOCK} bytes")));
            }
            // Drained: all input taken, and room left over (so the inflater holds nothing back).
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
            if consumed == 0 && produced == 0 {
                return Err(Error::Compression("no progress".into()));
            }
        }
    }
}

/// A header block's pairs: a count, then each name and value after its length (four big-endian bytes each).
fn parse_header_block(mut block: &[u8]) -> Result<Headers, Error> {
    fn string(block: &mut &[u8]) -> Result<String, Error> {
        if block.len() < 4 {
            return Err(Error::HeaderBlock("a length past the block's end"));
        }
        let length = usize::try_from(block.get_u32()).unwrap_or(usize::MAX);
        let bytes = block.get(..length).ok_or(Error::HeaderBlock("a length past the block's end"))?;
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| Error::HeaderBlock("a name or value not UTF-8"))?;
        *block = &block[length..];
        Ok(text)
    }
    if block.len() < 4 {
        return Err(Error::HeaderBlock("no count"));
    }
    let count = block.get_u32();
    if usize::try_from(count).map_or(true, |n| n > MAX_HEADERS) {
        return Err(Error::HeaderBlock("too many pairs"));
    }
    let mut pairs = Vec::new();
    for _ in 0..count {
        let name = string(&mut block)?.to_ascii_lowercase();
        let value = string(&mut block)?;
        if name.is_empty() {
            return Err(Error::HeaderBlock("an empty name"));
        }
        pairs.push((name, value));
    }
    Ok(Headers(pairs))
}

// === impl Encoder ===

/// Writes frames to a peer, deflating header blocks with the connection's one zlib stream.
pub struct Encoder {
    deflate: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        // A fresh stream takes a dictionary; were it refused, the block would say it has none, which peers read too.
        let _ = deflate.set_dictionary(&dictionary());
        Encoder { deflate }
    }
}

impl Encoder {
    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), Error> {
        let fin = |fin: bool| if fin { FLAG_FIN } else { 0 };
        let mut payload = BytesMut::new();
        let (kind, flags) = match frame {
            Frame::Data { stream, fin: last, data } => {
                let length =
                    u32::try_from(data.len()).ok().filter(|n| *n < 1 << 24).ok_or(Error::TooLarge(data.len()))?;
                out.put_u32(stream & 0x7fff_ffff);
                out.put_u32(u32::from(fin(*last)) << 24 | length);
                out.extend_from_slice(data);
                return Ok(());
            }
            Frame::SynStream { stream, associated, priority, fin: last, unidirectional, headers } => {
                payload.put_u32(*stream);
                payload.put_u32(*associated);
                payload.put_u8(priority << 5);
                payload.put_u8(0);
                self.deflate_headers(headers, &mut payload)?;
                (1, fin(*last) | if *unidirectional { FLAG_UNIDIRECTIONAL } else { 0 })
            }
            Frame::SynReply { stream, fin: last, headers } | Frame::Headers { stream, fin: last, headers } => {
                payload.put_u32(*stream);
                self.deflate_headers(headers, &mut payload)?;
                (if matches!(frame, Frame::SynReply { .. }) { 2 } else { 8 }, fin(*last))
            }
            Frame::RstStream { stream, status } => {
                payload.put_u32(*stream);
                payload.put_u32(*status);
                (3, 0)
            }
            Frame::Settings { .. } => {
                payload.put_u32(0);
                (4, 0)
            }
            Frame::Ping { id } => {
                payload.put_u32(*id);
                (6, 0)
            }
            Frame::GoAway { last_good, status } => {
                payload.put_u32(*last_good);
                payload.put_u32(*status);
                (7, 0)
            }
            Frame::WindowUpdate { stream, delta } => {
                payload.put_u32(*stream);
                payload.put_u32(*delta);
                (9, 0)
            }
            Frame::Unknown { kind } => (*kind, 0),
        };
        let length =
            u32::try_from(payload.len()).ok().filter(|n| *n < 1 << 24).ok_or(Error::TooLarge(payload.len()))?;
        out.put_u16(0x8000 | VERSION);
        out.put_u16(kind);
        out.put_u32(u32::from(flags) << 24 | length);
        out.extend_from_slice(&payload);
        Ok(())
    }

    fn deflate_headers(&mut self, headers: &Headers, out: &mut BytesMut) -> Result<(), Error> {
        let mut block = Vec::new();
        block.put_u32(u32::try_from(headers.0.len()).map_err(|_| Error::HeaderBlock("too many pairs"))?);
        for (name, value) in &headers.0 {
            for text in [name.to_ascii_lowercase().as_str(), value.as_str()] {
                block.put_u32(u32::try_from(text.len()).map_err(|_| Error::HeaderBlock("a value too long"))?);
                block.extend_from_slice(text.as_bytes());
            }
        }
        let mut input = block.as_slice();
        let mut compressed = Vec::with_capacity(block.len() + 64);
        loop {
            compressed.reserve(256);
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut compressed, FlushCompress::Sync)
                .map_err(|e| Error::Compression(e.to_string()))?;
            let consumed = usize::try_from(self.deflate.total_in() - before).unwrap_or(usize::MAX);
            input = input.get(consumed..).unwrap_or_default();
            if input.is_empty() && compressed.len() < compressed.capacity() {
                break;
            }
        }
        out.extend_from_slice(&compressed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header block as a peer writes it, compressed by a zlib stream of the test's own with SPDY/3's dictionary.
    fn client_block(deflate: &mut Compress, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        block.put_u32(pairs.len() as u32);
        for (name, value) in pairs {
            for text in [name, value] {
                block.put_u32(text.len() as u32);
                block.extend_from_slice(text.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(block.len() + 128);
        deflate.compress_vec(&block, &mut out, FlushCompress::Sync).unwrap();
        out
    }

    fn client_deflate() -> Compress {
        let mut deflate = Compress::new(Compression::best(), true);
        deflate.set_dictionary(&dictionary()).unwrap();
        deflate
    }

    /// A control frame's bytes, laid out by hand: version 3, type, flags, 24-bit length, payload.
    fn control(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let length = payload.len() as u32;
        let mut frame = vec![0x80, 0x03, 0x00, kind, flags];
        frame.extend_from_slice(&length.to_be_bytes()[1..]);
        frame.extend_from_slice(payload);
        frame
    }

    fn decode_all(decoder: &mut Decoder, bytes: &[u8]) -> Result<Vec<Frame>, Error> {
        let mut buffer = BytesMut::from(bytes);
        let mut frames = Vec::new();
        while let Some(frame) = decoder.decode(&mut buffer)? {
            frames.push(frame);
        }
        assert!(buffer.is_empty(), "{} bytes left", buffer.len());
        Ok(frames)
    }

    #[test]
    fn the_dictionary_is_spdy_3s() {
        let dictionary = dictionary();
        assert_eq!(dictionary.len(), 1423);
        assert_eq!(&dictionary[..11], b"\0\0\0\x07options");
        assert!(dictionary.ends_with(b",*,enq=0."));
    }

    #[test]
    fn data_frames_carry_a_stream_flags_and_bytes() {
        let mut decoder = Decoder::default();
        let bytes = [0, 0, 0, 5, 0x01, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 7, 0, 0, 0, 0];
        let frames = decode_all(&mut decoder, &bytes).unwrap();
        assert_eq!(
            frames,
            [
                Frame::Data { stream: 5, fin: true, data: Bytes::from_static(b"abc") },
                Frame::Data { stream: 7, fin: false, data: Bytes::new() },
            ]
        );
        // A frame is taken only once whole.
        let mut partial = BytesMut::from(&bytes[..9]);
        assert_eq!(decoder.decode(&mut partial), Ok(None));
        assert_eq!(partial.len(), 9);
    }

    #[test]
    fn syn_streams_inflate_their_headers_from_one_zlib_stream() {
        let mut deflate = client_deflate();
        let mut bytes = Vec::new();
        for (id, kind) in [(1u32, "error"), (3, "data")] {
            let mut payload = Vec::new();
            payload.put_u32(id);
            payload.put_u32(0);
            payload.extend_from_slice(&[0x20, 0]);
            payload.extend(client_block(&mut deflate, &[("streamType", kind), ("port", "80"), ("requestID", "0")]));
            bytes.extend(control(1, 0, &payload));
        }
        let frames = decode_all(&mut Decoder::default(), &bytes).unwrap();
        let Frame::SynStream { stream: 3, priority: 1, fin: false, headers, .. } = &frames[1] else {
            panic!("{frames:?}")
        };
        assert_eq!((headers.get("streamtype"), headers.get("PORT")), (Some("data"), Some("80")));
        assert!(
            matches!(&frames[0], Frame::SynStream { stream: 1, headers, .. } if headers.get("streamType") == Some("error"))
        );
    }

    #[test]
    fn control_frames_are_read_as_laid_out() {
        let mut bytes = control(6, 0, &[0, 0, 0, 9]);
        bytes.extend(control(3, 0, &[0, 0, 0, 1, 0, 0, 0, 5]));
        bytes.extend(control(7, 0, &[0, 0, 0, 3, 0, 0, 0, 0]));
        bytes.extend(control(9, 0, &[0, 0, 0, 1, 0, 1, 0, 0]));
        bytes.extend(control(4, 0, &[0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 100]));
        bytes.extend(control(0x42, 0, b"whatever"));
        let frames = decode_all(&mut Decoder::default(), &bytes).unwrap();
        assert_eq!(
            frames,
            [
                Frame::Ping { id: 9 },
                Frame::RstStream { stream: 1, status: 5 },
                Frame::GoAway { last_good: 3, status: 0 },
                Frame::WindowUpdate { stream: 1, delta: 65536 },
                Frame::Settings { entries: 1 },
                Frame::Unknown { kind: 0x42 },
            ]
        );
    }

    #[test]
    fn what_breaks_a_bound_or_the_protocol_is_an_error() {
        // A length over the limit is refused from the header alone, before any payload arrives.
        let huge = [0x80, 0x03, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff];
        assert_eq!(Decoder::default().decode(&mut BytesMut::from(&huge[..])), Err(Error::TooLarge(0xff_ffff)));
        let data = [0, 0, 0, 1, 0, 0x10, 0, 1];
        assert_eq!(Decoder::default().decode(&mut BytesMut::from(&data[..])), Err(Error::TooLarge(0x10_0001)));
        let v2 = [0x80, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1];
        assert_eq!(Decoder::default().decode(&mut BytesMut::from(&v2[..])), Err(Error::Version(2)));
        assert_eq!(decode_all(&mut Decoder::default(), &control(6, 0, &[1])), Err(Error::Malformed("PING")));
        let settings = control(4, 0, &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode_all(&mut Decoder::default(), &settings), Err(Error::Malformed("SETTINGS")));
        // A header block that is no zlib.
        let garbage = control(2, 0, &[0, 0, 0, 1, 1, 2, 3, 4]);
        assert!(matches!(decode_all(&mut Decoder::default(), &garbage), Err(Error::Compression(_))));
    }

    #[test]
    fn header_blocks_are_bounded_in_size_count_and_lengths() {
        let reply = |block: &[u8]| {
            let mut deflate = client_deflate();
            let mut compressed = Vec::with_capacity(block.len() + 1024);
            deflate.compress_vec(block, &mut compressed, FlushCompress::Sync).unwrap();
            let mut payload = vec![0, 0, 0, 1];
            payload.extend(compressed);
            decode_all(&mut Decoder::default(), &control(2, 0, &payload))
        };
        // A megabyte of zeros deflates to a kilobyte, and inflates past the bound.
        assert!(matches!(reply(&vec![0u8; 1 << 20]), Err(Error::Compression(_))));
        let mut many = Vec::new();
        many.put_u32(MAX_HEADERS as u32 + 1);
        assert_eq!(reply(&many), Err(Error::HeaderBlock("too many pairs")));
        let mut overrun = Vec::new();
        overrun.put_u32(1);
        overrun.put_u32(1000);
        overrun.extend_from_slice(b"name");
        assert_eq!(reply(&overrun), Err(Error::HeaderBlock("a length past the block's end")));
    }

    #[test]
    fn what_this_side_writes_reads_back() {
        let (mut encoder, mut decoder) = (Encoder::default(), Decoder::default());
        let headers = Headers(vec![("streamtype".into(), "error".into())]);
        let frames = [
            Frame::SynReply { stream: 1, fin: false, headers: Headers::default() },
            Frame::SynStream { stream: 2, associated: 0, priority: 0, fin: true, unidirectional: false, headers },
            Frame::Data { stream: 1, fin: true, data: Bytes::from_static(b"bye") },
            Frame::RstStream { stream: 1, status: status::CANCEL },
            Frame::GoAway { last_good: 1, status: 0 },
            Frame::Ping { id: 1 },
        ];
        let mut bytes = BytesMut::new();
        for frame in &frames {
            encoder.encode(frame, &mut bytes).unwrap();
        }
        // A SYN_REPLY as laid out: control bit and version, type 2.
        assert_eq!(&bytes[..4], [0x80, 0x03, 0x00, 0x02]);
        assert_eq!(decode_all(&mut decoder, &bytes).unwrap(), frames);
    }
}
