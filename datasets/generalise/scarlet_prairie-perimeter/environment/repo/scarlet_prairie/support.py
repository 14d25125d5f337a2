def perimeter(w, text):
    return 2 * w + text
