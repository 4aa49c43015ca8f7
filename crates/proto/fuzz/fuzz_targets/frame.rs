//! Every decoder a server or client runs on bytes from the network: request frames, reply
//! frames, the welcome, a hello and an admission. None may panic (libFuzzer turns a panic into a crash, before the
//! `catch_unwind` of `decode_request` could contain it), whatever the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use madfs_proto::frame::{decode_reply, decode_request};

fuzz_target!(|data: &[u8]| {
    let _ = decode_request(data);
    let _ = decode_reply(data);
    let _ = flexbuffers::from_slice::<madfs_proto::Welcome>(data);
    let _ = flexbuffers::from_slice::<madfs_proto::Hello>(data);
    let _ = flexbuffers::from_slice::<madfs_proto::Admission>(data);
});
