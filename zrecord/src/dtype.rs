//! The element types a container can hold.
//!
//! A dtype is stored in the manifest by its canonical name (NumPy / ml_dtypes spelling) together with
//! its item size; opening a container whose name is unknown or whose item size disagrees with the
//! catalog is refused. All values are stored native-endian (every supported platform is little-endian).

use std::fmt;

/// DLPack type codes (`DLDataTypeCode`, DLPack 1.1).
pub mod dlpack_code {
    /// Signed integer.
    pub const INT: u8 = 0;
    /// Unsigned integer.
    pub const UINT: u8 = 1;
    /// IEEE float.
    pub const FLOAT: u8 = 2;
    /// bfloat16.
    pub const BFLOAT: u8 = 4;
    /// Complex (two floats).
    pub const COMPLEX: u8 = 5;
    /// Boolean (one byte).
    pub const BOOL: u8 = 6;
    /// float8 e3m4.
    pub const FLOAT8_E3M4: u8 = 7;
    /// float8 e4m3.
    pub const FLOAT8_E4M3: u8 = 8;
    /// float8 e4m3b11fnuz.
    pub const FLOAT8_E4M3B11FNUZ: u8 = 9;
    /// float8 e4m3fn.
    pub const FLOAT8_E4M3FN: u8 = 10;
    /// float8 e4m3fnuz.
    pub const FLOAT8_E4M3FNUZ: u8 = 11;
    /// float8 e5m2.
    pub const FLOAT8_E5M2: u8 = 12;
    /// float8 e5m2fnuz.
    pub const FLOAT8_E5M2FNUZ: u8 = 13;
    /// float8 e8m0fnu.
    pub const FLOAT8_E8M0FNU: u8 = 14;
}

macro_rules! dtypes {
    ($( $variant:ident => $name:literal, $size:literal, $code:expr; )*) => {
        /// A supported element type.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum DType {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl DType {
            /// Every supported dtype, in catalog order.
            pub const ALL: &'static [DType] = &[$(DType::$variant),*];

            /// Canonical name (NumPy / ml_dtypes spelling), as stored in the manifest.
            pub const fn name(self) -> &'static str {
                match self { $(DType::$variant => $name,)* }
            }

            /// Size of one element in bytes.
            pub const fn itemsize(self) -> usize {
                match self { $(DType::$variant => $size,)* }
            }

            /// DLPack `(code, bits, lanes)` for this dtype.
            pub const fn dlpack(self) -> (u8, u8, u16) {
                match self { $(DType::$variant => ($code, ($size * 8) as u8, 1),)* }
            }
        }
    };
}

dtypes! {
    Bool => "bool", 1, dlpack_code::BOOL;
    Int8 => "int8", 1, dlpack_code::INT;
    Int16 => "int16", 2, dlpack_code::INT;
    Int32 => "int32", 4, dlpack_code::INT;
    Int64 => "int64", 8, dlpack_code::INT;
    UInt8 => "uint8", 1, dlpack_code::UINT;
    UInt16 => "uint16", 2, dlpack_code::UINT;
    UInt32 => "uint32", 4, dlpack_code::UINT;
    UInt64 => "uint64", 8, dlpack_code::UINT;
    Float16 => "float16", 2, dlpack_code::FLOAT;
    BFloat16 => "bfloat16", 2, dlpack_code::BFLOAT;
    Float32 => "float32", 4, dlpack_code::FLOAT;
    Float64 => "float64", 8, dlpack_code::FLOAT;
    Complex64 => "complex64", 8, dlpack_code::COMPLEX;
    Complex128 => "complex128", 16, dlpack_code::COMPLEX;
    Float8E3M4 => "float8_e3m4", 1, dlpack_code::FLOAT8_E3M4;
    Float8E4M3 => "float8_e4m3", 1, dlpack_code::FLOAT8_E4M3;
    Float8E4M3B11Fnuz => "float8_e4m3b11fnuz", 1, dlpack_code::FLOAT8_E4M3B11FNUZ;
    Float8E4M3Fn => "float8_e4m3fn", 1, dlpack_code::FLOAT8_E4M3FN;
    Float8E4M3Fnuz => "float8_e4m3fnuz", 1, dlpack_code::FLOAT8_E4M3FNUZ;
    Float8E5M2 => "float8_e5m2", 1, dlpack_code::FLOAT8_E5M2;
    Float8E5M2Fnuz => "float8_e5m2fnuz", 1, dlpack_code::FLOAT8_E5M2FNUZ;
    Float8E8M0Fnu => "float8_e8m0fnu", 1, dlpack_code::FLOAT8_E8M0FNU;
}

impl DType {
    /// Looks a dtype up by its canonical name.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Looks a dtype up by its DLPack `(code, bits, lanes)`.
    pub fn from_dlpack(code: u8, bits: u8, lanes: u16) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.dlpack() == (code, bits, lanes))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for &d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            let (c, b, l) = d.dlpack();
            assert_eq!(DType::from_dlpack(c, b, l), Some(d));
            assert_eq!(usize::from(b) / 8, d.itemsize());
        }
        assert_eq!(DType::from_name("float128"), None);
        assert_eq!(DType::from_name(""), None);
    }
}
