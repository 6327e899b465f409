//! Small files replaced atomically (docs/design.md §3 rule 2): write `<name>.tmp`, fsync it, rename
//! it over `<name>`, fsync the directory. When `replace_file` returns Ok, the new content is
//! durable and a crash at any point leaves either the old or the new file, never a mix.
//! An fsync error is returned, never retried: the caller stops (rule 4).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Errors name the file (`segment::with_path`).
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    replace_unnamed(path, contents).map_err(|e| super::segment::with_path(path, e))
}

fn replace_unnamed(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().expect("a file path").to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// `replace_file` on the glommio ring, for shards that must never block (the raft shard):
/// the same steps and the same guarantee when it returns Ok.
pub async fn replace_file_async(path: &Path, contents: &[u8]) -> io::Result<()> {
    let result = replace_unnamed_async(path, contents).await;
    result.map_err(|e| super::segment::with_path(path, e))
}

async fn replace_unnamed_async(path: &Path, contents: &[u8]) -> io::Result<()> {
    // glommio 0.9 opens relative to dirfd -1, not the working directory: only absolute paths
    // work. `std::path::absolute` touches no disk.
    let path = &std::path::absolute(path)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().expect("a file path").to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let file = glommio::io::BufferedFile::create(&tmp).await?;
    let mut written = 0;
    while written < contents.len() {
        let n = file
            .write_at(contents[written..].to_vec(), written as u64)
            .await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
        }
        written += n;
    }
    // fdatasync covers the size too: the file is new, so its length is data to be synced.
    file.fdatasync().await?;
    file.close().await?;
    glommio::io::rename(&tmp, path).await?;
    glommio::io::Directory::open(dir).await?.sync().await?;
    Ok(())
}
