//! Pipelines are built lazily, once per (kernel, specialization), and the driver's pipeline
//! cache is written to disk and read back by the next context. One test in this file: it sets
//! the process-wide cache directory.

use vkformers_kernels::elementwise;
use vkformers_vk::pipeline::cache_path;
use vkformers_vk::testing::on_every_device;

#[test]
fn pipelines_are_lazy_and_cached_on_disk() {
    let dir = std::env::temp_dir().join(format!("vkformers-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("VKFORMERS_CACHE_DIR", &dir);
    on_every_device("pipeline cache", |ctx| {
        assert_eq!(ctx.pipeline_count(), 0, "no pipeline before the first dispatch");
        let x = ctx.buffer(4096, "x")?;
        let mut rec = ctx.recorder(false)?;
        for _ in 0..3 {
            elementwise::fill(&mut rec, x.view(), 1.0)?;
        }
        elementwise::add(&mut rec, x.view(), x.view(), x.view())?;
        rec.submit()?;
        assert_eq!(ctx.pipeline_count(), 2, "one pipeline per kernel, reused");
        ctx.save_pipeline_cache()?;
        let path = cache_path(ctx.caps()).expect("cache path");
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(path.starts_with(&dir) && size > 0, "cache file {} missing or empty", path.display());
        Ok(())
    });
    // A second round of contexts starts from the saved cache (the driver validates it).
    on_every_device("pipeline cache reload", |ctx| {
        let x = ctx.buffer(4096, "x")?;
        let mut rec = ctx.recorder(false)?;
        elementwise::fill(&mut rec, x.view(), 3.0)?;
        rec.submit()?;
        let v: Vec<f32> = ctx.read_vec(x.view())?;
        assert!(v.iter().all(|&e| e == 3.0));
        Ok(())
    });
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary cache files left behind");
    let _ = std::fs::remove_dir_all(&dir);
}
