//! Proptest strategies for JSON texts that exercise member walks.

use proptest::prelude::*;

/// Object texts `{"type":"TY", ...}` with up to `max` more members: each key
/// one of `keys` (written as JSON key bodies, so `"message\\u0049d"` is an
/// escaped key) or `k0` to `k{wide - 1}` (wide objects), each value one of
/// `values` (JSON texts), with no space, one space or mixed white space
/// around every token. Repeated keys come naturally.
pub fn object_text(
    ty: &str,
    keys: &[&str],
    values: &[&str],
    wide: u8,
    max: usize,
) -> BoxedStrategy<String> {
    let named: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let key = prop_oneof![
        proptest::sample::select(named),
        (0..wide.max(1)).prop_map(|i| format!("k{i}")),
    ];
    let values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
    let value = proptest::sample::select(values);
    let space = prop_oneof![Just(""), Just(" "), Just("\r\n\t ")];
    let head = format!("{{\"type\":\"{ty}\"");
    proptest::collection::vec((key, value, space), 0..=max)
        .prop_map(move |members| {
            let mut text = head.clone();
            for (k, v, sp) in members {
                text.push_str(&format!(",{sp}\"{k}\"{sp}:{sp}{v}{sp}"));
            }
            text.push('}');
            text
        })
        .boxed()
}
