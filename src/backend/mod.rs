//! Compute backends.
//!
//! Every backend provides the same set of operations, named after the layer and the
//! direction (`conv2d_forward`, `conv2d_backward`, ...), in the style of llm.c: outputs
//! first, then inputs, then shapes. Layers in [`crate::model`] call these operations on
//! slices of the model's flat parameter and gradient buffers, so a device backend (CUDA,
//! cargo feature `cuda`) implements the same functions over device buffers and the layers
//! stay unchanged.

pub mod cpu;
