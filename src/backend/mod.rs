//! Compute backends.
//!
//! Every backend provides the same set of operations, named after the layer and the
//! direction (`conv2d_forward`, `conv2d_backward`, ...), in the style of llm.c: outputs
//! first, then inputs, then shapes. Layers in [`crate::model`] call these operations on
//! slices of the model's flat parameter and gradient buffers, so a device backend (CUDA,
//! cargo feature `cuda`) implements the same functions over device buffers and the layers
//! stay unchanged.

pub mod cpu;

use crate::config::DeviceKind;

/// The device a run computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
}

/// Resolves `device.kind`. This build has the CPU backend only: `auto` falls back to it
/// (and says so), `cuda` is refused rather than silently run on the CPU.
pub fn select(kind: DeviceKind) -> anyhow::Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Auto => {
            log::debug!("device: auto -> cpu (this build has no CUDA backend)");
            Ok(Device::Cpu)
        }
        DeviceKind::Cuda => anyhow::bail!(
            "device.kind: this build has no CUDA backend, so \"cuda\" cannot run; use \"cpu\" or \"auto\", got \"cuda\""
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_refused_and_auto_falls_back_to_the_cpu() {
        assert_eq!(select(DeviceKind::Auto).unwrap(), Device::Cpu);
        assert_eq!(select(DeviceKind::Cpu).unwrap(), Device::Cpu);
        let e = select(DeviceKind::Cuda).unwrap_err().to_string();
        assert!(e.starts_with("device.kind:"), "{e}");
    }
}
