//! Shared helpers of the K-quants (scale search, 6-bit scale packing).
