def starts_with(w, x):
    return w[:len(x) - 1] == x
