//! TensorBoard's event files: TFRecord framing around `Event` protocol buffers.
//!
//! A record is `length: u64 LE`, `masked_crc32c(length): u32 LE`, `data`,
//! `masked_crc32c(data): u32 LE`, where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
//! (tensorflow/core/lib/hash/crc32c.h). The messages are the subset of
//! tensorflow/core/util/event.proto and framework/summary.proto that scalars need; prost skips
//! every other field, so graphs, images and histograms read as events without a scalar.

use prost::Message;

/// `Event` of event.proto (`TfEvent` here, beside the engine's `Event`): when, at which step, and what.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TfEvent {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "event::What", tags = "3, 5")]
    pub what: Option<event::What>,
}

pub mod event {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum What {
        /// The first event of a file: "brain.Event:2".
        #[prost(string, tag = "3")]
        FileVersion(String),
        #[prost(message, tag = "5")]
        Summary(super::Summary),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `Summary.Value`: a tag and its value — `simple_value` (TF1, PyTorch's SummaryWriter) or a
/// tensor (TF2's `tf.summary.scalar`, whose plugin is named in the metadata of a tag's first
/// value only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "summary_value::Value", tags = "2, 8")]
    pub value: Option<summary_value::Value>,
}

pub mod summary_value {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(float, tag = "2")]
        SimpleValue(f32),
        #[prost(message, tag = "8")]
        Tensor(super::TensorProto),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `TensorProto` (framework/tensor.proto), the fields a scalar can use.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    #[prost(int32, repeated, tag = "13")]
    pub half_val: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<TensorDim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorDim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

// types.proto's DataType values a scalar comes in.
const DT_FLOAT: i32 = 1;
const DT_DOUBLE: i32 = 2;
const DT_BFLOAT16: i32 = 14;
const DT_HALF: i32 = 19;

/// The plugin TensorBoard draws tensor scalars with.
pub const SCALARS_PLUGIN: &str = "scalars";

/// The first event of every file.
pub const FILE_VERSION: &str = "brain.Event:2";

const MASK_DELTA: u32 = 0xa282_ead8;
/// After a damaged length, the longest record the reader looks for (a scalar event is tens of
/// bytes): it bounds the work of finding the next whole record in a crafted file.
const MAX_RESYNC_RECORD: usize = 1 << 20;
const HEADER: usize = 12;
const FOOTER: usize = 4;

/// TFRecord's masked CRC-32C.
pub fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(MASK_DELTA)
}

/// Appends one framed record.
pub fn push_record(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

/// Appends one event as a record.
pub fn push_event(out: &mut Vec<u8>, event: &TfEvent) {
    push_record(out, &event.encode_to_vec());
}

/// A scalar event: `tag` = `value` at `step`.
pub fn scalar_event(wall_time: f64, step: i64, tag: &str, value: f32) -> TfEvent {
    TfEvent {
        wall_time,
        step,
        what: Some(event::What::Summary(Summary {
            value: vec![SummaryValue {
                tag: tag.to_string(),
                metadata: None,
                value: Some(summary_value::Value::SimpleValue(value)),
            }],
        })),
    }
}

/// What [`split_records`] found wrong in a file; nothing wrong is all `None`/0.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Damage {
    /// Records whose checksum failed (skipped), and where the first began.
    pub bad_records: usize,
    pub first_bad_at: Option<u64>,
    /// Bytes after the last whole record: the file ends inside a record.
    pub truncated_at: Option<u64>,
    /// Records whose checksum held but which are not an `Event`.
    pub undecodable: usize,
}

impl Damage {
    pub fn is_clean(&self) -> bool {
        self.bad_records == 0 && self.truncated_at.is_none() && self.undecodable == 0
    }

    /// One line for the user, `None` when clean.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.bad_records > 0 {
            parts.push(format!(
                "{} damaged record{} skipped (the first at byte {})",
                self.bad_records,
                if self.bad_records == 1 { "" } else { "s" },
                self.first_bad_at.unwrap_or(0)
            ));
        }
        if self.undecodable > 0 {
            parts.push(format!("{} records that are not events", self.undecodable));
        }
        if let Some(at) = self.truncated_at {
            parts.push(format!("truncated at byte {at} (the last record is cut)"));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// The whole records of `bytes`, in order. A record whose length checksum fails is skipped by
/// looking for the next offset where a whole record's both checksums hold (a flipped byte in
/// a length would otherwise lose the rest of the file); one whose data checksum fails is skipped
/// by its length; a cut end is reported.
pub fn split_records(bytes: &[u8]) -> (Vec<&[u8]>, Damage) {
    let mut records = Vec::new();
    let mut damage = Damage::default();
    let mut pos = 0usize;
    // What the searches for a whole record after a damaged length may hash in all: a crafted
    // file of headers that pass but records that do not would make it quadratic.
    let mut budget = (2 * bytes.len()).max(64 << 20);
    let bad = |damage: &mut Damage, at: usize| {
        damage.bad_records += 1;
        damage.first_bad_at.get_or_insert(at as u64);
    };
    while pos < bytes.len() {
        match record_at(bytes, pos, usize::MAX) {
            Record::Whole(data, next) => {
                records.push(data);
                pos = next;
            }
            Record::BadData(next) => {
                bad(&mut damage, pos);
                pos = next;
            }
            Record::Cut => {
                damage.truncated_at = Some(pos as u64);
                break;
            }
            Record::BadHeader => {
                bad(&mut damage, pos);
                match resync(bytes, pos + 1, &mut budget) {
                    Some(p) => pos = p,
                    None => {
                        // Nothing whole found, or the search's budget spent: the rest is lost.
                        damage.truncated_at = Some(pos as u64);
                        break;
                    }
                }
            }
        }
    }
    (records, damage)
}

/// The offset of the next whole record from `from`, hashing at most `budget` bytes (taken off
/// it) in the search.
fn resync(bytes: &[u8], from: usize, budget: &mut usize) -> Option<usize> {
    for p in from..bytes.len() {
        let claimed = claimed_len(bytes, p)?;
        if claimed == 0 {
            continue;
        }
        *budget = budget.checked_sub(claimed)?;
        if let Record::Whole(..) = record_at(bytes, p, MAX_RESYNC_RECORD) {
            return Some(p);
        }
    }
    None
}

/// The data length a header at `pos` claims when its own checksum holds and the record would
/// fit the resync bound (Some(0): not a header); none past the end.
fn claimed_len(bytes: &[u8], pos: usize) -> Option<usize> {
    let header = bytes.get(pos..pos + HEADER)?;
    let (len_bytes, len_crc) = header.split_at(8);
    let stored = u32::from_le_bytes([len_crc[0], len_crc[1], len_crc[2], len_crc[3]]);
    if masked_crc(len_bytes) != stored {
        return Some(0);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(len_bytes);
    match usize::try_from(u64::from_le_bytes(len)) {
        Ok(n) if n <= MAX_RESYNC_RECORD => Some(n.max(1)),
        _ => Some(0),
    }
}

enum Record<'a> {
    /// The data and where the next record begins.
    Whole(&'a [u8], usize),
    /// The length held, the data's checksum did not: the next record's offset.
    BadData(usize),
    BadHeader,
    /// The file ends inside the record.
    Cut,
}

/// The record at `pos`; one claiming more than `max_len` bytes counts as a damaged header.
fn record_at(bytes: &[u8], pos: usize, max_len: usize) -> Record<'_> {
    let rest = &bytes[pos..];
    let Some(header) = rest.get(..HEADER) else {
        return Record::Cut;
    };
    let (len_bytes, len_crc) = header.split_at(8);
    let stored = u32::from_le_bytes([len_crc[0], len_crc[1], len_crc[2], len_crc[3]]);
    if masked_crc(len_bytes) != stored {
        return Record::BadHeader;
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(len_bytes);
    let len = u64::from_le_bytes(len);
    if usize::try_from(len).map_or(true, |n| n > max_len) {
        return Record::BadHeader;
    }
    let Some(end) = usize::try_from(len)
        .ok()
        .and_then(|n| HEADER.checked_add(n)?.checked_add(FOOTER))
    else {
        return Record::Cut;
    };
    let Some(whole) = rest.get(..end) else {
        return Record::Cut;
    };
    let data = &whole[HEADER..end - FOOTER];
    let footer = &whole[end - FOOTER..];
    let stored = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]);
    if masked_crc(data) == stored {
        Record::Whole(data, pos + end)
    } else {
        Record::BadData(pos + end)
    }
}

/// One scalar read from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub tag: String,
    pub step: i64,
    pub wall_time: f64,
    pub value: f64,
}

/// Every scalar of an event file's records, whichever way it was written: `simple_value`, or a
/// one-element tensor (float, double, half, bfloat16; in `tensor_content` or the typed field) of a
/// tag whose first metadata names the scalars plugin. `plugins` carries each tag's plugin across
/// the files of one run, as TensorBoard does.
pub fn scalars(
    records: &[&[u8]],
    plugins: &mut std::collections::HashMap<String, String>,
    damage: &mut Damage,
) -> Vec<Scalar> {
    let mut out = Vec::new();
    for data in records {
        let Ok(event) = TfEvent::decode(*data) else {
            damage.undecodable += 1;
            continue;
        };
        let Some(event::What::Summary(summary)) = event.what else {
            continue;
        };
        for v in summary.value {
            if let Some(plugin) = v.metadata.as_ref().and_then(|m| m.plugin_data.as_ref()) {
                plugins
                    .entry(v.tag.clone())
                    .or_insert_with(|| plugin.plugin_name.clone());
            }
            let value = match v.value {
                Some(summary_value::Value::SimpleValue(x)) => Some(f64::from(x)),
                Some(summary_value::Value::Tensor(t))
                    if plugins.get(&v.tag).map(String::as_str) == Some(SCALARS_PLUGIN) =>
                {
                    tensor_scalar(&t)
                }
                _ => None,
            };
            if let Some(value) = value {
                out.push(Scalar {
                    tag: v.tag,
                    step: event.step,
                    wall_time: event.wall_time,
                    value,
                });
            }
        }
    }
    out
}

/// The value of a one-element tensor, if it is one of a floating type.
fn tensor_scalar(t: &TensorProto) -> Option<f64> {
    // One element: every dimension 1 (a product could overflow on a crafted shape).
    if t.tensor_shape
        .as_ref()
        .is_some_and(|s| s.dim.iter().any(|d| d.size != 1))
    {
        return None;
    }
    let c = &t.tensor_content;
    let half = |bits: u16, bf16: bool| {
        if bf16 {
            f64::from(half::bf16::from_bits(bits))
        } else {
            f64::from(half::f16::from_bits(bits))
        }
    };
    match t.dtype {
        DT_FLOAT => match c.get(..4) {
            Some(b) => Some(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            None => t.float_val.first().map(|&x| f64::from(x)),
        },
        DT_DOUBLE => match c.get(..8) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Some(f64::from_le_bytes(a))
            }
            None => t.double_val.first().copied(),
        },
        DT_HALF | DT_BFLOAT16 => {
            let bf16 = t.dtype == DT_BFLOAT16;
            match c.get(..2) {
                Some(b) => Some(half(u16::from_le_bytes([b[0], b[1]]), bf16)),
                None => t.half_val.first().map(|&x| half(x as u16, bf16)),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(events: &[TfEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in events {
            push_event(&mut out, e);
        }
        out
    }

    /// The masked CRC by its definition, from CRC-32C's published check value:
    /// crc32c("123456789") = 0xE3069283 (RFC 3720 B.4's polynomial; the "check" of the
    /// CRC catalogue).
    #[test]
    // Spelled as crc32c.h spells it, not as the code does.
    #[allow(clippy::manual_rotate)]
    fn the_mask_is_tensorflows() {
        let crc: u32 = 0xE306_9283;
        let masked = ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8);
        assert_eq!(masked_crc(b"123456789"), masked);
    }

    #[test]
    fn records_round_trip_and_a_damaged_one_is_skipped_once() {
        let events: Vec<TfEvent> = (0..5)
            .map(|i| scalar_event(1.0e9 + i as f64, i, "valid/total/ppl", 100.0 - i as f32))
            .collect();
        let clean = file(&events);
        let (records, damage) = split_records(&clean);
        assert!(damage.is_clean(), "{damage:?}");
        let mut plugins = Default::default();
        let mut d = Damage::default();
        let got = scalars(&records, &mut plugins, &mut d);
        assert_eq!(got.len(), 5);
        assert_eq!((got[3].step, got[3].value), (3, 97.0));

        // Where each record begins (step 0 is not encoded: the first is shorter).
        let starts: Vec<usize> = (0..=5).map(|k| file(&events[..k]).len()).collect();
        // A bit flipped in the data of record 1 (of 5): four read, one reported.
        let mut flipped = clean.clone();
        flipped[starts[1] + HEADER + 3] ^= 0x10;
        let (records, damage) = split_records(&flipped);
        assert_eq!(records.len(), 4);
        assert_eq!(
            (damage.bad_records, damage.first_bad_at),
            (1, Some(starts[1] as u64))
        );
        // In record 2's length: its checksum fails, the reader finds record 3.
        let mut flipped = clean.clone();
        flipped[starts[2] + 1] ^= 0x01;
        let (records, damage) = split_records(&flipped);
        assert_eq!(records.len(), 4, "{damage:?}");
        let steps: Vec<i64> = scalars(&records, &mut plugins, &mut Damage::default())
            .iter()
            .map(|s| s.step)
            .collect();
        assert_eq!(steps, [0, 1, 3, 4]);
        // A length that claims more than the file: the rest is lost, said once.
        let cut = &clean[..clean.len() - 7];
        let (records, damage) = split_records(cut);
        assert_eq!(records.len(), 4);
        assert_eq!(damage.truncated_at, Some(starts[4] as u64));
        assert!(damage.describe().is_some_and(|d| d.contains("truncated")));
        // Garbage alone: nothing, and no panic.
        let (records, damage) = split_records(&[0xff; 40]);
        assert!(records.is_empty() && damage.bad_records == 1);
        // A crafted file: a damaged header, then headers that pass each claiming 1 MiB whose
        // data never does. The search gives up within its budget instead of hashing 1 MiB at
        // each of them.
        let mut crafted = vec![0xffu8; 12];
        let claim = (MAX_RESYNC_RECORD as u64).to_le_bytes();
        for _ in 0..200_000 {
            crafted.extend_from_slice(&claim);
            crafted.extend_from_slice(&masked_crc(&claim).to_le_bytes());
        }
        // (Without the budget this would hash 200,000 MiB; with it, 64 MiB.)
        let (records, damage) = split_records(&crafted);
        assert!(
            records.is_empty() && damage.truncated_at.is_some(),
            "{damage:?}"
        );
    }

    /// TF2's scalars: a tensor, the plugin named only in the tag's first value; a histogram's
    /// one-element tensor is not a scalar.
    #[test]
    fn tensor_scalars_follow_the_plugin_of_their_tags_first_value() {
        let tensor = |dtype: i32, content: Vec<u8>| TensorProto {
            dtype,
            tensor_content: content,
            ..Default::default()
        };
        let value = |tag: &str, plugin: Option<&str>, t: TensorProto| SummaryValue {
            tag: tag.into(),
            metadata: plugin.map(|p| SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: p.into(),
                    content: Vec::new(),
                }),
            }),
            value: Some(summary_value::Value::Tensor(t)),
        };
        let event = |step: i64, v: SummaryValue| TfEvent {
            wall_time: 1.0,
            step,
            what: Some(event::What::Summary(Summary { value: vec![v] })),
        };
        let events = [
            event(
                0,
                value(
                    "loss",
                    Some("scalars"),
                    tensor(DT_FLOAT, 2.5f32.to_le_bytes().to_vec()),
                ),
            ),
            event(
                1,
                value(
                    "loss",
                    None,
                    tensor(DT_DOUBLE, 1.25f64.to_le_bytes().to_vec()),
                ),
            ),
            // f16 1.5 = 0x3E00; bf16 −2 = 0xC000.
            event(
                2,
                value(
                    "loss",
                    None,
                    tensor(DT_HALF, 0x3E00u16.to_le_bytes().to_vec()),
                ),
            ),
            event(
                3,
                value(
                    "loss",
                    None,
                    tensor(DT_BFLOAT16, 0xC000u16.to_le_bytes().to_vec()),
                ),
            ),
            event(
                4,
                value(
                    "loss",
                    None,
                    TensorProto {
                        dtype: DT_FLOAT,
                        float_val: vec![0.5],
                        ..Default::default()
                    },
                ),
            ),
            event(
                0,
                value(
                    "weights",
                    Some("histograms"),
                    tensor(DT_FLOAT, 7f32.to_le_bytes().to_vec()),
                ),
            ),
        ];
        let bytes = file(&events);
        let (records, _) = split_records(&bytes);
        let got = scalars(&records, &mut Default::default(), &mut Damage::default());
        let values: Vec<(i64, f64)> = got.iter().map(|s| (s.step, s.value)).collect();
        assert_eq!(values, [(0, 2.5), (1, 1.25), (2, 1.5), (3, -2.0), (4, 0.5)]);
        assert!(got.iter().all(|s| s.tag == "loss"));
    }
}
