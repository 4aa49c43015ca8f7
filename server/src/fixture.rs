//! Test fixtures: a server of one, on a temporary directory.

use crate::server::{root_attr, Server};
use madfs_proto::Request;
use madfs_store::chunks::FsChunks;
use madfs_store::rocks::RocksMeta;
use std::sync::Arc;

/// `open(path, O_CREAT | O_EXCL, 0644)` as root.
pub fn new_file(path: &str) -> Request<'_> {
    Request::Create {
        path,
        mode: 0o644,
        uid: 0,
        gid: 0,
        excl: true,
        trunc: false,
        access: 0,
        holder: 0,
    }
}

pub fn server(dir: &std::path::Path) -> Server {
    let one = madfs_rpc::ClusterIdentity::new(1, 4096, 1024).unwrap();
    Server {
        id: 0,
        peers: Arc::new(crate::peer::Peers::new(
            one,
            None,
            madfs_rpc::UcxSettings::default(),
            madfs_auth::Key::from_bytes([7; 32]),
        )),
        replica: None,
        node: Default::default(),
        mapped: false,
        frozen: Default::default(),
        strays: Default::default(),
        dirs: Default::default(),
        dir_times: Default::default(),
        sealed: Default::default(),
        opens: crate::state::opens::OpenRefs::new(
            crate::state::opens::LEASE,
            crate::state::opens::HOLDERS_PER_USER,
        ),
        moving: Default::default(),
        meta: RocksMeta::open(&dir.join("db")).unwrap(),
        chunks: FsChunks::open(&dir.join("data"), true).unwrap(),
        chunk_size: 4096,
        max_list_bytes: 1 << 16,
        inline_max: 1024,
        stats: Arc::default(),
        root: root_attr(madfs_identity::AuthMode::Munge, None),
        leases: crate::state::leases::Leases::new(std::time::Duration::from_secs(1), 1000, 0)
            .first_life(),
    }
}

pub fn create<'a>(path: &'a str, excl: bool) -> Request<'a> {
    Request::Create {
        path,
        mode: 0o644,
        uid: 0,
        gid: 0,
        excl,
        trunc: false,
        access: 0,
        holder: 0,
    }
}
