def total_length(words):
    return sum(len(w) for w in words)


def compute_starts_with(n, right):
    return n[:len(right) - 1] == right
