def swap_pair(seq):
    r, lst = seq
    return (r, lst)
