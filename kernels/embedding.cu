// Embedding lookup and its scatter-add backward. ids are device copies of the host ids,
// checked below the vocabulary on the host. Semantics: src/backend/cpu/embedding.rs.

// out rows first_row.. = table rows ids; table [vocab x dim].
extern "C" __global__ void embedding_forward(float* out, const unsigned* ids,
                                             unsigned long long first_row,
                                             unsigned long long count, const float* table,
                                             unsigned long long dim) {
    GRID_STRIDE(i, count * dim) {
        unsigned long long r = i / dim, j = i % dim;
        out[(first_row + r) * dim + j] = table[(unsigned long long)ids[r] * dim + j];
    }
}

// dtable row ids[r] += dout row r. A repeated id adds its rows atomically (the order of
// those additions, hence the last bits, may vary from run to run).
extern "C" __global__ void embedding_backward(float* dtable, const float* dout, const unsigned* ids,
                                              unsigned long long count, unsigned long long dim) {
    GRID_STRIDE(i, count * dim) {
        unsigned long long r = i / dim, j = i % dim;
        atomicAdd(dtable + (unsigned long long)ids[r] * dim + j, dout[i]);
    }
}
