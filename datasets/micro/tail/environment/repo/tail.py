def tail(xs, n):
    return xs[n:]
