def maximum(seq, z):
    if seq < z:
        return seq
    return z
