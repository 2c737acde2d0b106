//! gatehouse's own HTTP/1.1 client reading an upstream's response (`gateway/src/proxy/h1.rs`:
//! the head, 1xx, framing per RFC 9112 §6.3, the chunked decoder), against hyper's client
//! reading the same bytes: `gatehouse::proxy::h1_fuzzing::check`, whose comment lists the
//! properties. In short: whatever gatehouse reads, hyper reads alike — status, fields,
//! framing, body, and the byte where the message ends (else a pooled connection could take
//! the rest for the next response) — and gatehouse refuses what hyper reads only where it
//! is stricter on purpose; never a panic.
//!
//! Text input (the seeds): a first line `GET` or `HEAD`, optionally with the size of each
//! read (`GET 3`), then the response as the upstream sends it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gatehouse::proxy::h1_fuzzing::check(data);
});
