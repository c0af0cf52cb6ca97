// im2col and col2im for convolution as a GEMM (cuBLAS multiplies the unfolded images by
// the weight). Semantics and layout: src/backend/cpu/conv.rs. Images `m` of a chunk sit
// side by side in `col`: row r = (c, ky, kx) at col[r * ld], image j's OH*OW columns from
// j * OH*OW, zero where the window reads padding.

struct Geometry {
    unsigned long long channels, height, width, kernel, stride, pad, out_h, out_w;
};

__device__ Geometry geometry(unsigned long long c, unsigned long long h, unsigned long long w,
                             unsigned long long k, unsigned long long s, unsigned long long p) {
    Geometry g;
    g.channels = c; g.height = h; g.width = w; g.kernel = k; g.stride = s; g.pad = p;
    g.out_h = (h + 2 * p - k) / s + 1;
    g.out_w = (w + 2 * p - k) / s + 1;
    return g;
}

// col[rows x ld] from images inp[m x C x H x W].
extern "C" __global__ void im2col(float* col, unsigned long long ld, const float* inp,
                                  unsigned long long m, unsigned long long c,
                                  unsigned long long h, unsigned long long w,
                                  unsigned long long k, unsigned long long s,
                                  unsigned long long p) {
    Geometry g = geometry(c, h, w, k, s, p);
    unsigned long long pix = g.out_h * g.out_w, rows = c * k * k;
    GRID_STRIDE(i, rows * m * pix) {
        unsigned long long row = i / (m * pix), rest = i % (m * pix);
        unsigned long long img = rest / pix, q = rest % pix;
        unsigned long long ch = row / (k * k), ky = row / k % k, kx = row % k;
        long long iy = (long long)((q / g.out_w) * s + ky) - (long long)p;
        long long ix = (long long)((q % g.out_w) * s + kx) - (long long)p;
        float v = 0.0f;
        if (iy >= 0 && iy < (long long)h && ix >= 0 && ix < (long long)w)
            v = inp[((img * c + ch) * h + iy) * w + ix];
        col[row * ld + img * pix + q] = v;
    }
}

// dinp[m x C x H x W] += the fold of col: each input pixel gathers every column entry
// whose window covers it (no atomics: one thread per input value).
extern "C" __global__ void col2im(float* dinp, const float* col, unsigned long long ld,
                                  unsigned long long m, unsigned long long c,
                                  unsigned long long h, unsigned long long w,
                                  unsigned long long k, unsigned long long s,
                                  unsigned long long p) {
    Geometry g = geometry(c, h, w, k, s, p);
    unsigned long long pix = g.out_h * g.out_w;
    GRID_STRIDE(i, m * c * h * w) {
        unsigned long long x = i % w, y = i / w % h, ch = i / (w * h) % c, img = i / (w * h * c);
        float sum = 0.0f;
        for (unsigned long long ky = 0; ky < k; ky++) {
            long long ty = (long long)(y + p) - (long long)ky;
            if (ty < 0 || ty % (long long)s != 0) continue;
            unsigned long long oy = ty / s;
            if (oy >= g.out_h) continue;
            for (unsigned long long kx = 0; kx < k; kx++) {
                long long tx = (long long)(x + p) - (long long)kx;
                if (tx < 0 || tx % (long long)s != 0) continue;
                unsigned long long ox = tx / s;
                if (ox >= g.out_w) continue;
                unsigned long long row = (ch * k + ky) * k + kx;
                sum += col[row * ld + img * pix + oy * g.out_w + ox];
            }
        }
        dinp[i] += sum;
    }
}

// rows[c x (n * plane)] from planes[n x c x plane]: a batch's output gradient with the
// images side by side, as the weight-gradient GEMM over the unfolded batch wants it.
extern "C" __global__ void planes_to_rows(float* rows, const float* planes, unsigned long long n,
                                          unsigned long long channels, unsigned long long plane) {
    GRID_STRIDE(i, n * channels * plane) {
        unsigned long long p = i % plane, c = i / plane % channels, img = i / (plane * channels);
        rows[c * n * plane + img * plane + p] = planes[i];
    }
}

// planes[n x c x plane] from rows[c x (n * plane)]: the inverse of planes_to_rows.
extern "C" __global__ void rows_to_planes(float* planes, const float* rows, unsigned long long n,
                                          unsigned long long channels, unsigned long long plane) {
    GRID_STRIDE(i, n * channels * plane) {
        unsigned long long p = i % plane, c = i / plane % channels, img = i / (plane * channels);
        planes[i] = rows[c * n * plane + img * plane + p];
    }
}
