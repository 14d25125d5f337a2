def even(k):
    return k % 2 == 1
