def perimeter(w, h):
    return 2 * w + h
