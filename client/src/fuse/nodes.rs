//! The kernel's inodes and the paths they stand for.
//!
//! FUSE names a file by a node id the file system chose (at `lookup`); madfs names it by
//! path. A node id here is the file's madfs id (its inode number, immutable, the same for
//! every name of a hard-linked file), so the kernel's inodes keep their identity through a
//! rename, and `stat` shows the file's real inode number. Only the root differs: FUSE's root
//! is node 1, so the root directory's id and 1 trade places ([`Nodes::node_of`]).
//!
//! Each node remembers the last path it was found under and how many lookups the kernel
//! holds on it; a node is dropped when the kernel forgets it. A rename rewrites the paths of
//! the node renamed and, for a directory, of every node below it that the kernel holds.

use madfs_proto::Errno;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Mutex;

/// FUSE's root node id.
pub const ROOT: u64 = 1;

#[derive(Debug)]
struct Node {
    /// Where the node was last found ("" once its name is gone: removed, or replaced by a
    /// rename).
    path: String,
    /// Lookups the kernel holds (the root: never forgotten).
    lookups: u64,
    dir: bool,
}

#[derive(Debug, Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    /// The node of each remembered path (a node's current path only).
    by_path: HashMap<String, u64>,
}

/// Node id ↔ path, shared by every FUSE thread.
#[derive(Debug)]
pub struct Nodes {
    /// madfs id of the root directory.
    root_id: u64,
    table: Mutex<Table>,
}

impl Nodes {
    /// A table holding only the root, whose madfs id is `root_id`.
    pub fn new(root_id: u64) -> Nodes {
        let mut t = Table::default();
        t.nodes.insert(
            ROOT,
            Node {
                path: "/".into(),
                lookups: 1,
                dir: true,
            },
        );
        t.by_path.insert("/".into(), ROOT);
        Nodes {
            root_id,
            table: Mutex::new(t),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node id of madfs file `id` (and the other way round: the map is its own inverse).
    pub fn node_of(&self, id: u64) -> u64 {
        if id == self.root_id {
            ROOT
        } else if id == ROOT {
            self.root_id
        } else {
            id
        }
    }

    /// The path of `node`; `ESTALE` for a node the table does not hold or whose name is gone.
    pub fn path(&self, node: u64) -> Result<String, Errno> {
        match self.lock().nodes.get(&node) {
            Some(n) if !n.path.is_empty() => Ok(n.path.clone()),
            _ => Err(Errno::ESTALE),
        }
    }

    /// The node the kernel holds at `path`, if any.
    pub fn node_at(&self, path: &str) -> Option<u64> {
        self.lock().by_path.get(path).copied()
    }

    /// The path of entry `name` of directory `parent`. `EINVAL` for a name that is not UTF-8
    /// (madfs names are), `ENAMETOOLONG` past 255 bytes.
    pub fn child(&self, parent: u64, name: &OsStr) -> Result<String, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let dir = self.path(parent)?;
        Ok(join(&dir, name))
    }

    /// The kernel now holds one more lookup of `node`, found at `path`.
    pub fn found(&self, node: u64, path: &str, dir: bool) {
        let mut t = self.lock();
        let old = match t.nodes.get_mut(&node) {
            Some(n) => {
                n.lookups += 1;
                n.dir = dir;
                if n.path == path {
                    return;
                }
                std::mem::replace(&mut n.path, path.to_owned())
            }
            None => {
                t.nodes.insert(
                    node,
                    Node {
                        path: path.to_owned(),
                        lookups: 1,
                        dir,
                    },
                );
                String::new()
            }
        };
        if t.by_path.get(&old) == Some(&node) {
            t.by_path.remove(&old);
        }
        if let Some(other) = t.by_path.insert(path.to_owned(), node) {
            // another node had that name: it was replaced behind our back
            if let Some(o) = t.nodes.get_mut(&other).filter(|_| other != node) {
                o.path.clear();
            }
        }
    }

    /// The kernel drops `n` lookups of `node`.
    pub fn forget(&self, node: u64, n: u64) {
        if node == ROOT {
            return;
        }
        let mut t = self.lock();
        let gone = match t.nodes.get_mut(&node) {
            Some(x) => {
                x.lookups = x.lookups.saturating_sub(n);
                x.lookups == 0
            }
            None => false,
        };
        if gone {
            let x = t.nodes.remove(&node).expect("node present");
            if t.by_path.get(&x.path) == Some(&node) {
                t.by_path.remove(&x.path);
            }
        }
    }

    /// The entry at `path` is gone (unlink, rmdir).
    pub fn removed(&self, path: &str) {
        let mut t = self.lock();
        if let Some(node) = t.by_path.remove(path) {
            if let Some(n) = t.nodes.get_mut(&node) {
                n.path.clear();
            }
        }
    }

    /// `from` was renamed to `to` (replacing what `to` named).
    pub fn renamed(&self, from: &str, to: &str) {
        self.removed(to);
        let mut t = self.lock();
        let Some(node) = t.by_path.remove(from) else {
            return;
        };
        let dir = match t.nodes.get_mut(&node) {
            Some(n) => {
                n.path = to.to_owned();
                n.dir
            }
            None => return,
        };
        t.by_path.insert(to.to_owned(), node);
        if !dir {
            return;
        }
        // every node the kernel holds below the directory moves with it
        let below = format!("{from}/");
        let moved: Vec<(u64, String)> = t
            .nodes
            .iter()
            .filter(|(_, n)| n.path.starts_with(&below))
            .map(|(id, n)| (*id, format!("{to}/{}", &n.path[below.len()..])))
            .collect();
        for (id, path) in moved {
            if let Some(n) = t.nodes.get_mut(&id) {
                let old = std::mem::replace(&mut n.path, path.clone());
                t.by_path.remove(&old);
                t.by_path.insert(path, id);
            }
        }
    }

    /// The entries of directory `dir` the kernel holds: (name, node).
    pub fn children(&self, dir: &str) -> Vec<(String, u64)> {
        let prefix = if dir == "/" {
            "/".to_owned()
        } else {
            format!("{dir}/")
        };
        self.lock()
            .by_path
            .iter()
            .filter_map(|(p, n)| {
                let name = p.strip_prefix(&prefix)?;
                (!name.is_empty() && !name.contains('/')).then(|| (name.to_owned(), *n))
            })
            .collect()
    }

    /// Every path the kernel holds a node at (the root included).
    pub fn all(&self) -> Vec<(String, u64)> {
        let t = self.lock();
        t.by_path.iter().map(|(p, n)| (p.clone(), *n)).collect()
    }

    /// Nodes held (the root included).
    pub fn held(&self) -> usize {
        self.lock().nodes.len()
    }
}

/// `dir/name` (`name` a single component; "." and ".." resolved).
fn join(dir: &str, name: &str) -> String {
    match name {
        "." | "" => dir.to_owned(),
        ".." => match dir.rfind('/') {
            Some(0) | None => "/".to_owned(),
            Some(i) => dir[..i].to_owned(),
        },
        _ if dir == "/" => format!("/{name}"),
        _ => format!("{dir}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_one_trade_places() {
        let n = Nodes::new(77);
        assert_eq!(n.node_of(77), ROOT);
        assert_eq!(n.node_of(ROOT), 77);
        assert_eq!(n.node_of(5), 5);
        assert_eq!(n.path(ROOT).unwrap(), "/");
    }

    #[test]
    fn children_and_dots() {
        let n = Nodes::new(9);
        assert_eq!(n.child(ROOT, OsStr::new("a")).unwrap(), "/a");
        n.found(10, "/a", true);
        assert_eq!(n.child(10, OsStr::new("b")).unwrap(), "/a/b");
        assert_eq!(n.child(10, OsStr::new("..")).unwrap(), "/");
        assert_eq!(n.child(10, OsStr::new(".")).unwrap(), "/a");
        let long = "x".repeat(256);
        assert_eq!(n.child(10, OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        assert_eq!(n.child(99, OsStr::new("b")), Err(Errno::ESTALE));
    }

    #[test]
    fn forget_drops_after_the_last_lookup() {
        let n = Nodes::new(9);
        n.found(10, "/a", false);
        n.found(10, "/a", false);
        n.forget(10, 1);
        assert_eq!(n.path(10).unwrap(), "/a");
        n.forget(10, 1);
        assert_eq!(n.path(10), Err(Errno::ESTALE));
        n.forget(ROOT, 100);
        assert_eq!(n.path(ROOT).unwrap(), "/");
        assert_eq!(n.held(), 1);
    }

    #[test]
    fn a_directory_rename_moves_what_is_below() {
        let n = Nodes::new(9);
        n.found(10, "/d", true);
        n.found(11, "/d/e", true);
        n.found(12, "/d/e/f", false);
        n.found(13, "/dx", false);
        n.found(14, "/t", false);
        n.renamed("/d", "/t");
        assert_eq!(n.path(10).unwrap(), "/t");
        assert_eq!(n.path(11).unwrap(), "/t/e");
        assert_eq!(n.path(12).unwrap(), "/t/e/f");
        assert_eq!(n.path(13).unwrap(), "/dx");
        // what /t named is gone
        assert_eq!(n.path(14), Err(Errno::ESTALE));
        n.removed("/t/e/f");
        assert_eq!(n.path(12), Err(Errno::ESTALE));
        // found again under a new name
        n.found(12, "/t/g", false);
        assert_eq!(n.path(12).unwrap(), "/t/g");
    }

    #[test]
    fn a_hard_link_is_one_node_at_its_last_name() {
        let n = Nodes::new(9);
        n.found(10, "/a", false);
        n.found(10, "/b", false);
        assert_eq!(n.path(10).unwrap(), "/b");
        n.forget(10, 2);
        assert_eq!(n.held(), 1);
    }
}
