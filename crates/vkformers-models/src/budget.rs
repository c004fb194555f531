//! The device memory a model will hold, checked against what the device grants before any
//! tensor is read or allocated: a model that cannot fit fails in seconds with the numbers and
//! what to change, instead of a 48 GiB host allocation or a host that swells toward the OOM
//! killer while a 7B initialisation is drawn.

use vkformers_vk::Caps;

use crate::error::{ModelError, Result};

/// Bytes a model's tensors hold on the device once loaded, before activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    /// Trainable parameters (f32), each with a gradient and two AdamW moments: 16 bytes each.
    pub trainable_elements: u64,
    /// Frozen tensors, in their device bytes (4 for f32, 2 for 16-bit storage).
    pub frozen_bytes: u64,
}

impl Need {
    /// Weights, gradients and optimizer moments.
    pub fn bytes(&self) -> u64 {
        self.trainable_elements.saturating_mul(16).saturating_add(self.frozen_bytes)
    }
}

/// What the device grants this process: the budget of its device-local heaps where the driver
/// reports one (VK_EXT_memory_budget), else their size.
pub fn capacity(caps: &Caps) -> u64 {
    caps.memory_heaps.iter().filter(|h| h.device_local).map(|h| h.budget.unwrap_or(h.size)).sum()
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// An error when `need` exceeds the device's capacity, saying what to change.
pub fn check(caps: &Caps, need: Need) -> Result<()> {
    let have = capacity(caps);
    if have == 0 || need.bytes() <= have {
        return Ok(());
    }
    let (what, advice) = if need.trainable_elements > 0 {
        (
            format!(
                "{:.2} GiB for {:.1}M trainable parameters (f32 weights, gradients and two AdamW moments) \
                 and {:.2} GiB of frozen tensors, before activations",
                gib(need.bytes()),
                need.trainable_elements as f64 / 1e6,
                gib(need.frozen_bytes)
            ),
            "fine-tune with LoRA (`vkformers finetune`), use a smaller model, or a device with more memory",
        )
    } else {
        (
            format!("{:.2} GiB for its weights", gib(need.bytes())),
            "load it in 16 bits (`--dtype bf16`), use a smaller model, or a device with more memory",
        )
    };
    Err(ModelError::Weights(format!("the model needs {what}, but {} grants {:.2} GiB; {advice}", caps.name, gib(have))))
}

#[cfg(test)]
mod tests {
    use vkformers_vk::MemoryHeap;

    use super::*;

    fn caps(size: u64, budget: Option<u64>) -> Caps {
        let heap = MemoryHeap { size, device_local: true, budget, usage: None };
        let host = MemoryHeap { size: 1 << 40, device_local: false, budget: None, usage: None };
        Caps { name: "test device".into(), memory_heaps: vec![heap, host], ..Caps::default() }
    }

    #[test]
    fn the_budget_wins_over_the_heap_size_and_host_heaps_do_not_count() {
        assert_eq!(capacity(&caps(100, Some(60))), 60);
        assert_eq!(capacity(&caps(100, None)), 100);
    }

    #[test]
    fn training_counts_sixteen_bytes_a_parameter_and_names_the_way_out() {
        let c = caps(1 << 30, None);
        check(&c, Need { trainable_elements: (1 << 30) / 16, frozen_bytes: 0 }).unwrap();
        let e = check(&c, Need { trainable_elements: (1 << 30) / 16 + 1, frozen_bytes: 0 }).unwrap_err().to_string();
        assert!(e.contains("test device grants 1.00 GiB") && e.contains("LoRA"), "{e}");
    }

    #[test]
    fn inference_suggests_sixteen_bit_weights() {
        let e = check(&caps(1 << 20, None), Need { trainable_elements: 0, frozen_bytes: 1 << 21 }).unwrap_err();
        assert!(e.to_string().contains("--dtype bf16"), "{e}");
    }
}
