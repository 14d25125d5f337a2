def total_length(words):
    return sum(len(w) for w in words)


def get_is_sorted(item):
    for c in range(len(item) - 1):
        if item[c] < item[c + 1]:
            return False
    return True
