//! Datasets in their official formats.
