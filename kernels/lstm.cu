// The element-wise part of one LSTM step (PyTorch's equations, gates i, f, g, o); the
// projections x W_ih^T and h W_hh^T and the biases go through cuBLAS into `gates` first.
// Semantics: src/backend/cpu/lstm.rs.

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// gates [B x 4H]: pre-activations in, activations out (kept for backward);
// c = f * c_prev + i * g, h = o * tanh(c).
extern "C" __global__ void lstm_cell_forward(float* gates, float* h, float* c, const float* c_prev,
                                             unsigned long long batch, unsigned long long hidden) {
    GRID_STRIDE(idx, batch * hidden) {
        unsigned long long b = idx / hidden, j = idx % hidden;
        float* g = gates + b * 4 * hidden;
        float i = sigmoidf(g[j]);
        float f = sigmoidf(g[hidden + j]);
        float gg = tanhf(g[2 * hidden + j]);
        float o = sigmoidf(g[3 * hidden + j]);
        g[j] = i; g[hidden + j] = f; g[2 * hidden + j] = gg; g[3 * hidden + j] = o;
        float cell = f * c_prev[idx] + i * gg;
        c[idx] = cell;
        h[idx] = o * tanhf(cell);
    }
}

// Backward of one step from the activations it kept: dh = dh_out + dh_next (the loss's
// gradient at this step's output and the recurrent one); dc holds the cell gradient from
// the step after on entry and the one for the step before on return. Writes the
// pre-activation gate gradients dgates [B x 4H].
extern "C" __global__ void lstm_cell_backward(float* dgates, float* dc, const float* dh_out,
                                              const float* dh_next, const float* gates,
                                              const float* c, const float* c_prev,
                                              unsigned long long batch, unsigned long long hidden) {
    GRID_STRIDE(idx, batch * hidden) {
        unsigned long long b = idx / hidden, j = idx % hidden;
        const float* g = gates + b * 4 * hidden;
        float i = g[j], f = g[hidden + j], gg = g[2 * hidden + j], o = g[3 * hidden + j];
        float dh = dh_out[idx] + dh_next[idx];
        float tc = tanhf(c[idx]);
        float dct = dc[idx] + dh * o * (1.0f - tc * tc);
        float* d = dgates + b * 4 * hidden;
        d[j] = dct * gg * i * (1.0f - i);
        d[hidden + j] = dct * c_prev[idx] * f * (1.0f - f);
        d[2 * hidden + j] = dct * i * (1.0f - gg * gg);
        d[3 * hidden + j] = dh * tc * o * (1.0f - o);
        dc[idx] = dct * f;
    }
}
