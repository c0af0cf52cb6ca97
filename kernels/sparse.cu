// Gather and scatter of selected entries: a sparse update's values from a dense buffer,
// and a sparse update applied to one.

// values[j] = dense[index[j]].
extern "C" __global__ void gather(float* values, const float* dense, const unsigned* index,
                                  unsigned long long k) {
    GRID_STRIDE(j, k) values[j] = dense[index[j]];
}

// dense[index[j]] += factor * values[j]. Atomic, so that repeated indices all count (top-k
// gives distinct ones, where the atomics cost nothing extra).
extern "C" __global__ void scatter_add(float* dense, const unsigned* index, const float* values,
                                       float factor, unsigned long long k) {
    GRID_STRIDE(j, k) atomicAdd(dense + index[j], factor * values[j]);
}

// dense[index[j]] = values[j].
extern "C" __global__ void scatter_set(float* dense, const unsigned* index, const float* values,
                                       unsigned long long k) {
    GRID_STRIDE(j, k) dense[index[j]] = values[j];
}
